"""LLVM compiles in spawned helper processes, for a process that must not fork.

`pipeline/compiler.py` compiles a new plan's kernels in forked copies of this process
while only fusegrad's own threads run (`forksafe.may_fork`). While a user's thread
lives it must not fork: a numpy matmul on that thread would wait for ever (OpenBLAS
shuts its pool down at every fork). Its LLVM work then goes to helpers started by
`subprocess` (vfork and exec: no fork handler runs, nothing of this process is copied),
the first time they are needed, and kept for the life of the process.

A helper imports fusegrad, says it is ready (one byte), then answers requests until its
input closes: a request is an optimization level and LLVM source, its answer the object
file `compiler._emit` makes and the seconds that took. The objects are the same bytes a
forked copy or this process would make: the same code, LLVM and CPU.

>>> from fusegrad.pipeline import compiler
>>> from fusegrad.runtime import compile_servers
>>> source = "define i32 @seven() {\\n  ret i32 7\\n}\\n"
>>> [(obj[:4], seconds >= 0) for obj, seconds in compile_servers.compile_objects(
...     [(source, 3)], 0, compiler._emit)]  # no helper asked for: compiled here
[(b'\\x7fELF', True)]

This process compiles too, from the back of the list while the helpers take from the
front, and hands a helper nothing until it is ready: the first plan after a thread
starts costs no more than compiling it here. A helper that dies, answers something
else, or says nothing for the patience given is dropped (killed), and its item compiled
here. One that ends before it is ready (it could not import fusegrad) stops this
process from starting more: it then compiles everything itself.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import select
import struct
import subprocess
import sys
import time

from . import forksafe

_REQUEST = struct.Struct("<BQ")  # optimization level, the source's length in bytes
_ANSWER = struct.Struct("<dQ")  # seconds, the object's length (all ones: it failed)
_FAILED = (1 << 64) - 1
_READY = b"r"
# the helper's program: the parent's import path, so that it imports the same fusegrad
# (the compiler handed in: it imports this module, not this module it)
_MAIN = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from fusegrad.pipeline import compiler; "
    "from fusegrad.runtime.compile_servers import serve; serve(compiler._emit, compiler._machine)"
)


class _Helper:
    """One spawned compiler: its process, and what it has said that is not read yet."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MAIN, json.dumps(sys.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self.requests, self.answers = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self.requests, False)  # (a stuck helper cannot stall a request)
        self.ready = False
        self.said = b""

    def ask(self, source: str, opt: int, patience: float) -> bool:
        """Send a request; False if the helper is gone or took none of it for `patience`
        seconds (a helper sent only part of one must be dropped)."""
        data = source.encode()
        view = memoryview(_REQUEST.pack(opt, len(data)) + data)
        try:
            while view:
                if not select.select([], [self.requests], [], patience)[1]:
                    return False
                view = view[os.write(self.requests, view) :]
        except OSError:
            return False
        return True

    def hear(self) -> bool:
        """Read what the helper has written (it is ready to read); False at its end."""
        try:
            chunk = os.read(self.answers, 1 << 20)
        except OSError:
            chunk = b""
        self.said += chunk
        if not self.ready and self.said[:1] == _READY:
            self.ready, self.said = True, self.said[1:]
        return bool(chunk)

    def answer(self) -> tuple[bytes, float] | None | bool:
        """The answer read whole, None if there is none yet, False if it failed."""
        if not self.ready or len(self.said) < _ANSWER.size:
            return None
        seconds, size = _ANSWER.unpack_from(self.said)
        if size == _FAILED:
            self.said = self.said[_ANSWER.size :]
            return False
        end = _ANSWER.size + size
        if len(self.said) < end:
            return None
        obj, self.said = self.said[_ANSWER.size : end], self.said[end:]
        return obj, seconds

    def stop(self, kill: bool = False) -> None:
        """End the helper: close its input (it leaves), or kill it; reap it either way."""
        for f in (self.process.stdin, self.process.stdout):
            f.close()
        if kill:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_helpers: list[_Helper] = []  # this process's, started when first needed (under the
# compile lock: `compiler._compile_objects` is their one caller)
_unable = False  # a helper ended before it was ready: start no more


def compile_objects(items: list[tuple[str, int]], helpers: int, emit, patience: float = 30.0):
    """`[emit(source, opt) for source, opt in items]`, made by this process and up to
    `helpers` spawned helpers side by side (started now if missing; a helper that cannot
    be started leaves its share here). A helper busy with an item for `patience`
    seconds, and ten times as long as this process's own items took, is killed."""
    _start(helpers)
    todo = collections.deque(range(len(items)))
    busy: dict[_Helper, int] = {}  # a helper -> the index it is compiling
    out: dict[int, tuple[bytes, float]] = {}
    t0 = time.perf_counter()
    try:
        while todo or busy:
            waited = max(patience, 10 * (time.perf_counter() - t0))
            _listen(busy, out, todo, 0.0 if todo else waited)
            for helper in _helpers[:helpers]:
                if todo and helper.ready and helper not in busy:
                    i = todo.popleft()
                    busy[helper] = i
                    if not helper.ask(*items[i], patience):
                        _drop(helper, busy, todo)
            if todo:
                i = todo.pop()
                out[i] = emit(*items[i])
    except BaseException:  # (an error here, Ctrl-C): a late answer must not be taken
        for helper in list(busy):  # for the next request's, so those helpers go
            _drop(helper, busy, todo)
        raise
    return [out[i] for i in range(len(items))]


def _start(helpers: int) -> None:
    while len(_helpers) < helpers and not _unable:
        try:
            _helpers.append(_Helper())
        except (OSError, ValueError):  # no executable (embedded Python), no processes
            return


def _listen(busy: dict, out: dict, todo: collections.deque, timeout: float) -> None:
    """Read what the helpers have said within `timeout` seconds: answers into `out`;
    a helper that ended, failed or said nothing for that long while busy is dropped, its
    item back in `todo`."""
    listening = [h for h in _helpers if not h.ready or h in busy]
    if not listening:
        return
    ready, _, _ = select.select([h.answers for h in listening], [], [], timeout)
    if not ready and timeout > 0:  # busy helpers, silent for the whole patience
        for helper in list(busy):
            _drop(helper, busy, todo)
        return
    for helper in listening:
        if helper.answers not in ready:
            continue
        if not helper.hear():
            _drop(helper, busy, todo)
            continue
        got = helper.answer()
        if got is None:
            continue
        if got is False:  # made here, where its error raises
            todo.append(busy.pop(helper))
        else:
            out[busy.pop(helper)] = got


def _drop(helper: _Helper, busy: dict, todo: collections.deque) -> None:
    global _unable
    _unable = _unable or not helper.ready
    if helper in busy:
        todo.append(busy.pop(helper))
    _helpers.remove(helper)
    helper.stop(kill=True)


@atexit.register
def _stop_all() -> None:
    while _helpers:
        _helpers.pop().stop()


@forksafe.at_fork
def _forget_helpers() -> None:
    """In a forked child: the helpers are the parent's (its pipes, its requests)."""
    for helper in _helpers:
        for f in (helper.process.stdin, helper.process.stdout):
            f.close()  # this child's copies of the pipes
        helper.process.returncode = 0  # not this child's to wait for, nor to warn about
    _helpers.clear()


def serve(_emit, _machine) -> None:
    """A helper's loop (the spawned process's program): compile each request read from
    standard input with `_emit(source, opt)` (`compiler._emit`), answer on standard output,
    until the input closes. `_machine(3)`: LLVM's target, set up before the first request."""
    requests, answers = os.dup(0), os.dup(1)
    os.dup2(2, 1)  # what anything prints goes to the parent's stderr, not into answers
    _machine(3)  # LLVM's target set up before the first request
    os.write(answers, _READY)
    with os.fdopen(requests, "rb") as inp:
        while header := inp.read(_REQUEST.size):
            if len(header) < _REQUEST.size:
                return
            opt, size = _REQUEST.unpack(header)
            source = inp.read(size).decode()
            try:
                obj, seconds = _emit(source, opt)
                answer = _ANSWER.pack(seconds, len(obj)) + obj
            except Exception:  # the parent compiles it again, and raises the error
                answer = _ANSWER.pack(0.0, _FAILED)
            view = memoryview(answer)
            while view:
                view = view[os.write(answers, view) :]
