"""Compiling beside a user's thread (runtime/compile_servers.py): no fork, spawned
helpers instead, making the same objects as this process; a helper that fails, dies or
is stuck costs only time."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
import uuid

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import compiler
from fusegrad.runtime import compile_servers, forksafe

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="compiles side by side")


def _items(n: int) -> list[tuple[str, int]]:
    """n distinct kernels `i64 name()` returning k, as (LLVM source, level)."""
    tag = uuid.uuid4().hex[:8]
    return [(f"define i64 @cs_{tag}_{k}() {{\n  ret i64 {k * 7}\n}}\n", 3) for k in range(n)]


def _ready(helpers: int) -> None:
    """Start `helpers` helpers and wait until each has imported fusegrad."""
    compile_servers._start(helpers)
    end = time.monotonic() + 60
    while not all(h.ready for h in compile_servers._helpers[:helpers]):
        assert time.monotonic() < end, "a compile helper never became ready"
        compile_servers._listen({}, {}, None, 0.05)


def _recording_emit(made_here: list, pause: float = 0.0):
    def emit(source: str, opt: int):
        made_here.append(source)
        time.sleep(pause)  # so that the helpers take a share
        return compiler._emit(source, opt)

    return emit


@contextlib.contextmanager
def _users_thread():
    """A user's thread, idle, alive inside the block (it may call numpy at any time)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.fixture
def no_fork(monkeypatch):
    def fork():
        raise AssertionError("fusegrad forked beside a user's thread")

    monkeypatch.setattr(os, "fork", fork)


def test_a_users_thread_forbids_forks_and_fusegrads_own_do_not():
    assert forksafe.may_fork()
    with _users_thread():
        assert not forksafe.may_fork()
    assert forksafe.may_fork()
    stop = threading.Event()
    thread = forksafe.Thread(target=stop.wait)  # as the worker pool's are made
    thread.start()
    assert forksafe.may_fork()
    stop.set()
    thread.join()
    with _users_thread():  # often given the ended thread's ident: it is not fusegrad's
        assert not forksafe.may_fork()


def test_tqdms_monitor_thread_keeps_the_fork_path():
    # a progress bar starts tqdm's monitor thread, which lives on after the bar: it only
    # sleeps, so it leaves the fork path to the compiles (a user's thread does not)
    import io

    from tqdm import tqdm

    bar = tqdm(total=2, file=io.StringIO(), mininterval=0)
    try:
        assert tqdm.monitor is not None and tqdm.monitor.is_alive()
        assert forksafe.may_fork()
        with _users_thread():
            assert not forksafe.may_fork()
    finally:
        bar.close()


def test_helpers_make_the_same_objects_as_this_process():
    items = _items(8)
    _ready(2)
    made_here = []
    got = compile_servers.compile_objects(items, 2, _recording_emit(made_here, 0.05))
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]
    assert 0 < len(made_here) < len(items), "the helpers and this process each took some"


@pytest.mark.usefixtures("no_fork")
def test_kernels_compiled_beside_a_users_thread_fork_nothing_and_run():
    items = _items(4)
    jobs = [(source, source.split("@")[1].split("(")[0], 0, opt) for source, opt in items]
    with _users_thread(), fg.config.override(compile_workers=3, cache=None):
        kernels = compiler.compile_kernels(jobs)
        assert compiler.side_by_side(4, lambda i: i * i, 3) == [0, 1, 4, 9]
    assert len(compile_servers._helpers) >= 2
    for k, kernel in enumerate(kernels):
        assert ctypes.CFUNCTYPE(ctypes.c_int64)(kernel.address)() == 7 * k


@pytest.mark.usefixtures("no_fork")
def test_a_new_plan_made_beside_a_users_thread_computes_what_one_process_does():
    tag = float(uuid.uuid4().int % 1000) / 1000 + 0.5  # new constants: new kernels
    a = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
    with _users_thread(), fg.config.override(compile_workers=2, cache=None):
        x = fg.tensor(a)
        got = fg.stack([(x * (tag + j)).exp().sum(1) for j in range(4)]).numpy()
    want = np.stack([np.exp(a * np.float32(tag + j)).sum(1) for j in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_an_item_a_helper_fails_is_compiled_here_where_the_error_raises():
    _ready(1)
    items = _items(2) + [("define i64 @broken( {", 3)]
    with pytest.raises(RuntimeError, match="expected type"):
        compile_servers.compile_objects(items, 1, compiler._emit)
    items = _items(3)  # the next compile takes no late answer for its own
    got = compile_servers.compile_objects(items, 1, _recording_emit([], 0.05))
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]


def test_a_helper_that_died_costs_only_time():
    _ready(1)
    compile_servers._helpers[0].process.kill()
    compile_servers._helpers[0].process.wait()
    items = _items(3)
    got = compile_servers.compile_objects(items, 1, compiler._emit)
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]


def test_a_stuck_helper_is_killed_and_its_item_compiled_here():
    _ready(1)
    stuck = compile_servers._helpers[0]
    os.kill(stuck.process.pid, signal.SIGSTOP)
    items = _items(4)
    t0 = time.monotonic()
    got = compile_servers.compile_objects(items, 1, compiler._emit, patience=0.5)
    assert time.monotonic() - t0 < 30
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]
    assert stuck not in compile_servers._helpers and stuck.process.returncode is not None


def test_a_forked_child_forgets_its_parents_helpers():
    _ready(1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if not compile_servers._helpers else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert compile_servers._helpers  # the parent's are still there


def test_an_answer_late_for_an_interrupted_compile_is_never_taken_for_the_next():
    _ready(1)

    def interrupted(source, opt):
        time.sleep(0.3)  # the helper has its item, and answers it meanwhile
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compile_servers.compile_objects(_items(3), 1, interrupted)
    _ready(1)
    items = _items(3)
    got = compile_servers.compile_objects(items, 1, _recording_emit([], 0.05))
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]


def test_a_request_a_stuck_helper_cannot_take_costs_only_time():
    """A source longer than a pipe holds, sent to a helper that reads nothing."""
    _ready(1)
    stuck = compile_servers._helpers[0]
    os.kill(stuck.process.pid, signal.SIGSTOP)
    (source, opt), *rest = _items(3)
    items = [(source + "; padding\n" * 40_000, opt), *rest]  # 400 KB
    got = []
    thread = threading.Thread(
        target=lambda: got.extend(compile_servers.compile_objects(items, 1, compiler._emit, 0.5)),
        daemon=True,
    )
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "stalled writing a request to a stuck helper"
    assert [obj for obj, _ in got] == [compiler._emit(*item)[0] for item in items]
    assert stuck not in compile_servers._helpers
