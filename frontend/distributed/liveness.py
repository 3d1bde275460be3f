"""Who is still in the job: arrival notices before each collective, and leave notices.

MPI's blocking collectives cannot be interrupted: a rank waiting in one for a
rank that stalled, or that left through `sys.exit`, waits forever (spinning
at 100% of a core), and then MPI_Finalize waits for it too. So a collective
starts with a gate, made of small point-to-point messages on a private
communicator:

- each rank entering collective #N sends "arrived at #N (all_reduce)" to
  every other rank, then waits until it has that notice from all of them,
  looking at its mailbox again at once (giving its core away in between) for
  the first millisecond, then after a growing sleep (at most 2 ms), so a
  waiting rank sleeps instead of spinning;
- only then does it call the MPI collective, which everyone is known to be
  calling too, so that call waits for nothing but the data.

While it waits, a rank knows exactly who is missing: when the group's
timeout runs out it raises naming the ranks that did not arrive, and when a
"left" notice comes instead (sent by a rank that leaves: `sys.exit`, `raise
SystemExit`, the end of its script, Ctrl-C, or `destroy_process_group()`) it
raises at once, naming that rank, how it left and its exit code. (A rank that
dies without a word, `os._exit` or a signal, is named by mpiexec and by the
launcher's watcher, watch.py: the job ends then.) A leaving rank waits, as MPI_Finalize would, until
every other rank leaves too (bounded by the timeout), so that nothing is in
flight when MPI is finalized.

Two ranks that call different collectives as their #N are caught at the gate
too (the notice names the collective). N counts the group's collectives of
every kind, from 1.

>>> live = Liveness(comm, timeout=60.0)            # doctest: +SKIP
>>> live.gate("all_reduce")                         # doctest: +SKIP
>>> comm.Allreduce(...)                             # doctest: +SKIP
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import FusegradError

ARRIVED, LEFT = 1, 2  # message kinds (the MPI tag)
# the collectives, by the function called: all_reduce and broadcast on tensors are not the
# same MPI calls as allreduce_arrays and broadcast_arrays (DDP's) on arrays
OPS = (
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather_object",
    "allreduce_arrays",
    "broadcast_arrays",
)
# how a rank left, in its notice
BY_SYS_EXIT, BY_SCRIPT_END, BY_DESTROY, BY_SYSTEM_EXIT, BY_INTERRUPT = 0, 1, 2, 3, 4
SPIN = 0.001  # seconds of looking at the mailbox without sleeping
MAX_PAUSE = 0.002  # seconds between two looks at the mailbox, once the wait is long


class DistributedError(FusegradError, RuntimeError):
    """No process group, no MPI, or a collective that failed or timed out.

    `exit_code` is the code the job should end with when nobody catches it
    (that of a rank that left the job with a non-zero code), else 1.
    """

    __module__ = "fusegrad.distributed"  # where users import it from

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def describe_leave(rank: int, code: int, how: int) -> str:
    """'rank 1 left the job through sys.exit(3) (exit code 3)' and the like.

    >>> describe_leave(1, 0, BY_SCRIPT_END)
    'rank 1 left the job: its script ended (exit code 0)'
    """
    if how == BY_SYS_EXIT:
        return f"rank {rank} left the job through sys.exit({code}) (exit code {code})"
    if how == BY_SYSTEM_EXIT:
        return f"rank {rank} left the job through raise SystemExit({code}) (exit code {code})"
    if how == BY_INTERRUPT:
        return f"rank {rank} left the job through KeyboardInterrupt (Ctrl-C; exit code {code})"
    if how == BY_DESTROY:
        return f"rank {rank} left the group (destroy_process_group())"
    return f"rank {rank} left the job: its script ended (exit code {code})"


class Liveness:
    """The gate and leave protocol of one process group (see the module docstring)."""

    def __init__(self, comm, timeout: float):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm  # private: only notices travel here
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.others = [r for r in range(self.size) if r != self.rank]
        self.timeout = timeout
        self.count = 0  # collectives entered so far
        self.op = 0  # the one entered last, as an index in OPS
        self.arrived = [0] * self.size  # per rank, the last collective it entered
        self.ops_of: dict[tuple[int, int], int] = {}  # (rank, #) -> op, for # not yet checked
        self.left: dict[int, tuple[int, int]] = {}  # rank -> (exit code, how it left)
        self.broken: DistributedError | None = None  # set once a gate failed
        self._sends: list = []  # (request, buffer): buffers live until sent
        self._inbox = np.zeros(3, np.int64)
        self._status = MPI.Status()

    # ---------------------------------------------------------------- collectives
    def gate(self, op: str) -> None:
        """Return once every rank has entered this collective; raise DistributedError if
        one left the job instead, called another collective, or is late past the timeout."""
        if self.broken is not None:
            raise DistributedError(
                f"{op}: the process group is broken ({self.broken}); no collective can run",
                self.broken.exit_code,
            )
        self.count += 1
        n = self.count
        self.op = OPS.index(op)
        self._send_all(ARRIVED, n, self.op)
        start = time.monotonic()
        for r in self.others:  # notices of ranks that were here first
            self._check_op(r, self.ops_of.pop((r, n), self.op))
        while True:
            self._receive()
            missing = [r for r in self.others if self.arrived[r] < n]
            if not missing:
                return
            waited = time.monotonic() - start
            gone = [r for r in missing if r in self.left]
            if gone:
                code = next((c for c, _ in (self.left[r] for r in gone) if c > 0), 1)
                self._fail(
                    "; ".join(describe_leave(r, *self.left[r]) for r in gone)
                    + f" without reaching {op} #{n}; rank {self.rank} waited {waited:.1f} s "
                    "for it there",
                    code,
                )
            if waited > self.timeout:
                who = ", ".join(map(str, missing))
                ranks = "rank" if len(missing) == 1 else "ranks"
                self._fail(
                    f"{ranks} {who} did not reach {op} #{n} within {self.timeout:g} s "
                    f"(rank {self.rank} waited {waited:.1f} s for it there): stuck, slower "
                    "than the timeout (init_process_group(timeout=...)), or calling fewer "
                    "collectives than the others"
                )
            _pause(waited)

    # ---------------------------------------------------------------- leaving
    def leave(self, how: int, code: int = 0) -> list[int]:
        """Tell every rank this one leaves, and wait (up to the timeout) for them to leave
        too. Returns the ranks that did not leave in time ([] when all did)."""
        self._send_all(LEFT, code, how)
        start = time.monotonic()
        while True:
            self._receive()
            staying = [r for r in self.others if r not in self.left]
            waited = time.monotonic() - start
            if not staying or waited > self.timeout:
                break
            _pause(waited)
        if not staying:
            # everyone has read everything sent to them, so the sends complete
            self._mpi.Request.Waitall([req for req, _ in self._sends])
            self._sends.clear()
        return staying

    # ---------------------------------------------------------------- the mailbox
    def _send_all(self, kind: int, a: int, b: int) -> None:
        self._sends = [(req, buf) for req, buf in self._sends if not req.Test()]
        buf = np.array([kind, a, b], np.int64)
        for r in self.others:
            self._sends.append((self.comm.Isend(buf, dest=r, tag=kind), buf))

    def _receive(self) -> None:
        """Read every notice that has come in (never waits)."""
        MPI, st = self._mpi, self._status
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st):
            src = st.Get_source()
            self.comm.Recv(self._inbox, source=src, tag=st.Get_tag())
            kind, a, b = self._inbox.tolist()
            if kind == ARRIVED:
                self.arrived[src] = a
                if a == self.count:
                    self._check_op(src, b)
                elif a > self.count:  # checked when this rank enters collective #a
                    self.ops_of[(src, a)] = b
            else:
                self.left[src] = (a, b)

    def _check_op(self, rank: int, op: int) -> None:
        if op != self.op:
            n, mine = self.count, OPS[self.op]
            self._fail(
                f"{mine} #{n}: rank {rank} called {OPS[op]} as the group's collective #{n} "
                f"while rank {self.rank} called {mine}; every rank must call the same "
                "collectives in the same order"
            )

    def _fail(self, message: str, exit_code: int = 1) -> None:
        self.broken = DistributedError(message, exit_code)
        raise self.broken


def _pause(waited: float) -> None:
    """For the first SPIN seconds give the core away and look again at once (the others
    are usually just behind); then sleep a sixteenth of the wait so far, at most
    MAX_PAUSE: a short wait costs little latency, a long one almost no CPU."""
    if waited < SPIN:
        os.sched_yield()
    else:
        time.sleep(min(waited / 16, MAX_PAUSE))
