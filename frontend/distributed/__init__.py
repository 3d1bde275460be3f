"""`fusegrad.distributed`: collectives across processes over MPI (as torch.distributed).

Each process of a job (started by `python -m fusegrad.distributed.run --nproc N
script.py`, or by `mpiexec` directly) calls `init_process_group()` once, then
exchanges tensor values with the others. Values travel through host copies:
a tensor is realized, its numpy array is sent with mpi4py, and the result is
given back to the tensor with `assign_`, so it stays the same tensor (the same
leaf, for a parameter).

>>> import fusegrad as fg
>>> import fusegrad.distributed as dist
>>> dist.init_process_group()          # under mpiexec -n 2: ranks 0 and 1
>>> t = fg.tensor([1.0, 2.0]) * (dist.get_rank() + 1)
>>> dist.all_reduce(t)                 # in place: the sum over the ranks
>>> t.tolist()                         # with one process: [1.0, 2.0]
[1.0, 2.0]
>>> dist.destroy_process_group()

The engine is MPI through mpi4py (Open MPI from Debian's `openmpi-bin`;
`pip install fusegrad[mpi]` brings mpi4py). It is imported on the first
`init_process_group()`, so `import fusegrad` never needs it.

Faults. Once a group exists, an exception that nobody catches in any rank
prints its traceback and aborts the whole job (`MPI_Abort`), so the other
ranks do not wait forever in a collective; a rank killed by a signal ends the
job through `mpiexec`. A rank that leaves (`sys.exit(code)` or `raise SystemExit(code)`,
any code, Ctrl-C, or the end of its script) while others wait in a
collective makes them raise `DistributedError` at once, naming it, how it
left and its code (exits.py says how the code is known); uncaught, that ends
the job with the same exit code (1 for 0). A rank that ends without a word
(`os._exit(code)`, a signal) is named with its code or signal by the
launcher's watcher (watch.py), and mpiexec ends the job. A collective that waits longer than
the group's `timeout` (30 minutes by default, as PyTorch) raises naming the
ranks that did not arrive. A waiting rank sleeps between looks at its
mailbox rather than spinning (`liveness.py` says how).
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import traceback

import numpy as np

from ..creation import from_numpy
from ..errors import DTypeError, ShapeError, fail
from . import exits
from .liveness import BY_DESTROY, BY_SCRIPT_END, DistributedError, Liveness
from .watch import tell_watcher

__all__ = [
    "DistributedError",
    "ReduceOp",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_initialized",
]

DEFAULT_TIMEOUT = 1800.0  # seconds, as torch.distributed's default of 30 minutes


class ReduceOp:
    """Names of the reductions `all_reduce` accepts (strings work too)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"


class _Group:
    """The process group: a private duplicate of MPI_COMM_WORLD, its settings, and (with
    several ranks) the arrival and leave notices on a second one (see liveness.py)."""

    def __init__(self, comm, timeout: float):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self.pid = os.getpid()  # a forked child inherits the group but is not a rank
        self.live = Liveness(comm.Dup(), timeout) if self.size > 1 else None


_group: _Group | None = None
_previous_excepthook = None
_atexit_registered = False


def is_available() -> bool:
    """Whether mpi4py can be imported (the MPI library itself is loaded on init)."""
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError(
            "fusegrad.distributed needs mpi4py and an MPI library: "
            "apt-get install openmpi-bin libopenmpi-dev; pip install -e .[mpi] "
            f"({e})"
        ) from None
    return MPI


def init_process_group(backend: str = "mpi", timeout=None, **_ignored) -> None:
    """Join the job's process group: every rank of the job calls this once.

    The rank and world size come from MPI (`mpiexec` sets them); a script run
    without `mpiexec` is a group of one. `timeout` (seconds or a
    `datetime.timedelta`; 30 minutes by default) bounds how long a collective
    waits for the other ranks. Also installs the fault handler: an uncaught
    exception aborts the whole job instead of leaving the others waiting.

    >>> import fusegrad.distributed as dist
    >>> dist.init_process_group()
    >>> dist.get_world_size() >= 1
    True
    >>> dist.destroy_process_group()
    """
    global _group, _previous_excepthook, _atexit_registered
    if backend != "mpi":
        raise ValueError(f"fusegrad.distributed supports the 'mpi' backend only, got {backend!r}")
    if _group is not None:
        raise DistributedError(
            "init_process_group: trying to initialize the default process group twice "
            "(call destroy_process_group() first)"
        )
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    MPI = _mpi()
    _group = _Group(MPI.COMM_WORLD.Dup(), timeout)
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _abort_on_uncaught
    exits.install(vars(sys.modules["__main__"]), sys._getframe(1).f_globals)
    tell_watcher(b"j")  # joined: from now on, ending without a word is a fault
    if not _atexit_registered:  # after mpi4py's import, so it runs before MPI_Finalize
        atexit.register(_leave_at_exit)
        _atexit_registered = True


def destroy_process_group() -> None:
    """Leave the process group (MPI itself is finalized when the process exits).

    With several ranks, this waits (up to the group's timeout) until every
    other rank has left too, by `destroy_process_group()` or by exiting; a
    rank still waiting in a collective for this one raises instead.
    """
    global _group, _previous_excepthook
    group = _require("destroy_process_group")
    _group = None
    if _previous_excepthook is not None:
        sys.excepthook = _previous_excepthook
        _previous_excepthook = None
    exits.uninstall()
    tell_watcher(b"l")
    if group.live is not None:
        staying = group.live.leave(BY_DESTROY)
        if staying:
            raise DistributedError(
                f"destroy_process_group: rank {group.rank} waited {group.timeout:g} s for "
                f"ranks {staying} to leave the group too; they are stuck or still running"
            )
        group.live.comm.Free()
    group.comm.Free()


def is_initialized() -> bool:
    """Whether `init_process_group()` has been called (and not destroyed)."""
    return _group is not None


def get_rank() -> int:
    """This process's rank, 0 .. world size - 1."""
    return _require("get_rank").rank


def get_world_size() -> int:
    """How many processes the group has."""
    return _require("get_world_size").size


def get_backend() -> str:
    _require("get_backend")
    return "mpi"


def _require(op: str) -> _Group:
    if _group is None:
        raise DistributedError(
            f"{op}: the default process group has not been initialized; "
            "call fusegrad.distributed.init_process_group() first"
        )
    return _group


# ---------------------------------------------------------------- collectives on tensors


def all_reduce(tensor, op: str = "sum") -> None:
    """Replace `tensor`'s value, on every rank, by its reduction over the ranks (in place).

    `op` is "sum", "mean" (floats only) or "max". Every rank must call it with
    a tensor of the same shape and dtype; a mismatch raises on every rank.

    >>> import fusegrad as fg
    >>> import fusegrad.distributed as dist
    >>> dist.init_process_group()
    >>> t = fg.tensor([3.0])
    >>> dist.all_reduce(t, op="max"); t.item()
    3.0
    >>> dist.destroy_process_group()
    """
    group = _require("all_reduce")
    op = str(op).lower()
    if op not in ("sum", "mean", "max"):
        raise ValueError(f"all_reduce: op must be 'sum', 'mean' or 'max', got {op!r}")
    if op == "mean" and not tensor.dtype.is_float:
        fail(DTypeError, "all_reduce", f"op='mean' needs a float tensor, got {tensor.dtype.name}")
    _check_same_everywhere(group, tensor, "all_reduce")
    values = np.array(tensor.numpy(), copy=True, order="C")
    _allreduce(group, [values], "max" if op == "max" else "sum")  # the check gathered all
    if op == "mean":
        values /= group.size
    _give_value(tensor, values)


def broadcast(tensor, src: int) -> None:
    """Give `tensor`, on every rank, the value it has on rank `src` (in place).

    >>> import fusegrad as fg
    >>> import fusegrad.distributed as dist
    >>> dist.init_process_group()
    >>> t = fg.tensor([float(dist.get_rank())])
    >>> dist.broadcast(t, src=0); t.item()
    0.0
    >>> dist.destroy_process_group()
    """
    group = _require("broadcast")
    if not 0 <= src < group.size:
        raise ValueError(f"broadcast: src {src} is not a rank of a group of {group.size}")
    _check_same_everywhere(group, tensor, "broadcast")
    values = np.array(tensor.numpy(), copy=True, order="C")
    _broadcast(group, [values], src)  # the check gathered all
    if group.rank != src:
        _give_value(tensor, values)


def barrier() -> None:
    """Wait until every rank has reached its barrier() (bounded by the group's timeout)."""
    group = _require("barrier")
    _gate(group, "barrier")
    group.comm.Barrier()


# ---------------------------------------------------------------- on numpy arrays (for DDP)


def allreduce_arrays(arrays: list[np.ndarray], op: str = "sum") -> None:
    """Reduce each C-contiguous array in place across the ranks, one MPI call per array.
    The caller guarantees equal shapes and dtypes on every rank."""
    group = _require("all_reduce")
    _gate(group, "allreduce_arrays")
    _allreduce(group, arrays, op)


def broadcast_arrays(arrays: list[np.ndarray], src: int) -> None:
    """Overwrite each C-contiguous array with rank `src`'s, in place."""
    group = _require("broadcast")
    _gate(group, "broadcast_arrays")
    _broadcast(group, arrays, src)


def allgather_object(obj) -> list:
    """Every rank's `obj` (small, picklable), in rank order, on every rank."""
    group = _require("all_gather_object")
    _gate(group, "all_gather_object")
    return group.comm.allgather(obj)


def _allreduce(group: _Group, arrays: list[np.ndarray], op: str) -> None:
    """MPI's all-reduce of each array, once every rank is known to be here (_gate)."""
    if group.size == 1:
        return
    MPI = _mpi()
    mpi_op = {"sum": MPI.SUM, "max": MPI.MAX}[op]
    for a in arrays:
        group.comm.Allreduce(MPI.IN_PLACE, a, op=mpi_op)


def _broadcast(group: _Group, arrays: list[np.ndarray], src: int) -> None:
    if group.size == 1:
        return
    for a in arrays:
        group.comm.Bcast(a, root=src)


# ---------------------------------------------------------------- faults


def _gate(group: _Group, op: str) -> None:
    """Wait, sleeping, until every rank has entered this collective (liveness.py): the
    MPI call that follows then waits for no one, and a rank that left or stalls is named."""
    if group.live is not None:
        group.live.gate(op)


def _check_same_everywhere(group: _Group, tensor, op: str) -> None:
    mine = (tuple(tensor.shape), tensor.dtype.name)
    _gate(group, op)
    everyone = group.comm.allgather(mine)
    for rank, theirs in enumerate(everyone):
        if theirs != mine:
            fail(
                ShapeError,
                op,
                f"rank {group.rank} has a tensor of shape {mine[0]} ({mine[1]}) but rank "
                f"{rank} has shape {theirs[0]} ({theirs[1]}); every rank must pass the same",
            )


def _give_value(tensor, values: np.ndarray) -> None:
    tensor.assign_(from_numpy(values.reshape(tensor.shape)))


def _abort_on_uncaught(kind, value, tb) -> None:
    """sys.excepthook while a group exists: report, then end every rank of the job."""
    group = _group
    alone = group is None or group.size == 1 or group.pid != os.getpid()  # or a forked child
    if issubclass(kind, KeyboardInterrupt):
        exits.interrupted()
    if alone or issubclass(kind, KeyboardInterrupt):
        (_previous_excepthook or sys.__excepthook__)(kind, value, tb)
        return
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write(
        f"[fusegrad.distributed] rank {group.rank} of {group.size} failed; "
        f"aborting the job:\n{text}"
    )
    _abort(getattr(value, "exit_code", 1))


def _abort(code: int) -> None:
    tell_watcher(b"a")  # the reason is printed: the watcher need not name this rank
    sys.stderr.flush()
    sys.stdout.flush()
    _mpi().COMM_WORLD.Abort(code)
    os._exit(code)  # pragma: no cover - Abort does not return


def _leave_at_exit() -> None:
    """atexit: a rank that exits with its group open tells the others, so that one
    waiting for it in a collective raises instead of hanging; then it waits for them
    to exit too, as MPI_Finalize would, but no longer than the group's timeout."""
    group = _group
    if group is None or group.pid != os.getpid():
        return
    tell_watcher(b"l")  # exiting through Python, with a word to the others
    live = group.live
    if live is None:
        return
    if live.broken is not None and not live.left:
        # a collective timed out and the error was caught: the stalled rank will not
        # answer, and MPI_Finalize would wait for it
        sys.stderr.write(f"[fusegrad.distributed] rank {group.rank}: {live.broken}\n")
        _abort(live.broken.exit_code)
    code, how = exits.last_exit() or (0, BY_SCRIPT_END)
    staying = live.leave(how, code)
    if staying:
        sys.stderr.write(
            f"[fusegrad.distributed] rank {group.rank} exited and waited {group.timeout:g} s "
            f"for ranks {staying} to exit too; they are stuck or still running. Aborting "
            "the job.\n"
        )
        _abort(code or 1)
