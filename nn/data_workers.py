"""DataLoader worker processes: `DataLoader(num_workers=N)` gathers batches in N child processes.

As torch's: the main process draws the order of the samples (so the batches are the
same for any `num_workers`), deals the batches' indices round-robin to the workers,
keeps `prefetch_factor` batches per worker in flight, and yields the results in order.
Each worker has its own copy of the dataset (forked where the platform can, else
spawned: then the dataset must pickle), seeds `random`, numpy's global generator and
fusegrad's `manual_seed` stream with `base_seed + worker_id`, calls `worker_init_fn`,
and answers `get_worker_info()`.

A batch travels as numpy arrays (a tensor is sent as its value, dtype and device, and
rebuilt in the main process), so nothing of a worker's graph crosses over. An exception
in a worker is raised again in the main process, of the same type, with the worker's
traceback in its message ("Caught ValueError in DataLoader worker process 1. Original
Traceback ..."). The workers stop when the iterator is exhausted or deleted (or, with
`persistent_workers`, when the DataLoader is), and are joined, so none is left a zombie.

fusegrad's own locks are fork-safe (runtime/forksafe.py), so a worker may build and run
kernels (a transform written with fusegrad ops) even while the main process's threads
compute.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import random
import sys
import time
import traceback
import weakref
from dataclasses import dataclass

import numpy as np

from ..nnapi import (
    Tensor,
    checked_dtype,
    default_device_name,
    from_numpy,
    is_host_device,
    manual_seed,
    set_default_device,
)

# how often a wait for a batch looks whether a worker died, in seconds
_STATUS_CHECK_INTERVAL = 0.25


@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` returns inside a worker (as torch's): the worker's `id`,
    `num_workers`, its `seed` (`base_seed + id`) and its copy of the `dataset`."""

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker, its `WorkerInfo`; in the main process, None.

    >>> get_worker_info() is None
    True
    """
    return _worker_info


class _WorkerError:
    """An exception caught in a worker, carried to the main process and raised again there."""

    def __init__(self, worker_id: int, exc: BaseException):
        self.exc_type = type(exc)
        try:
            pickle.dumps(self.exc_type)
        except Exception:  # a class that cannot travel (defined in a function): say which
            self.exc_type = RuntimeError
        self.where = f"in DataLoader worker process {worker_id}"
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"
        if self.exc_type is KeyError:  # KeyError quotes its argument: keep the lines readable
            raise KeyError(_KeyErrorMessage(msg))
        try:
            exception = self.exc_type(msg)
        except Exception:  # a type whose constructor takes other arguments
            raise RuntimeError(msg) from None
        try:
            raise exception
        finally:  # the traceback holds this frame: no cycle keeping the iterator alive
            exception = None


class _Exhausted:
    """A worker's answer when its stream (an IterableDataset) has no batch left."""

    def __init__(self, worker_id: int):
        self.worker_id = worker_id


class _KeyErrorMessage(str):
    def __repr__(self):
        return str(self)


class _HostTensor:
    """A tensor on its way from a worker: its value as numpy, its dtype and device."""

    def __init__(self, t: Tensor):
        self.array = np.ascontiguousarray(t.detach()._host())
        self.dtype = t.dtype.name  # by name: a dtype is compared by identity
        self.device = str(t.device)

    def rebuild(self) -> Tensor:
        t = from_numpy(self.array.reshape(self.array.shape), device=self.device)
        dtype = checked_dtype(self.dtype, "DataLoader")
        return t if t.dtype is dtype else t.to(dtype)


def _to_host(obj):
    if isinstance(obj, Tensor):
        return _HostTensor(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _to_host(v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(_to_host(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def _from_host(obj):
    if isinstance(obj, _HostTensor):
        return obj.rebuild()
    if isinstance(obj, dict):
        return type(obj)((k, _from_host(v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_from_host(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_from_host(v) for v in obj)
    return obj


def _worker_loop(fetch, dataset, index_queue, result_queue, worker_id, num_workers, seed, init_fn):
    """The body of a worker process: fetch each batch whose indices arrive, until None."""
    global _worker_info
    if not is_host_device(default_device_name()):
        # a GPU does not survive a fork: a worker's tensors are the CPU's, as torch's
        set_default_device(None)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    manual_seed(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    init_error = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as e:
        init_error = _WorkerError(worker_id, e)
    parent = os.getppid()
    while True:
        try:
            task = index_queue.get(timeout=_STATUS_CHECK_INTERVAL * 4)
        except queue.Empty:
            if os.getppid() != parent:  # the main process is gone: nobody will ask again
                break
            continue
        if task is None:
            break
        key, indices = task
        if init_error is not None:
            data, init_error = init_error, None
        else:
            try:
                data = _to_host(fetch(indices))
            except StopIteration:  # this worker's copy of an IterableDataset ran out
                data = _Exhausted(worker_id)
            except Exception as e:
                data = _WorkerError(worker_id, e)
        # pickled here, not in the queue's feeder thread, where a failure would be lost
        try:
            payload = pickle.dumps((key, data), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            payload = pickle.dumps((key, _WorkerError(worker_id, e)))
        result_queue.put(payload)
    # the main process may have stopped reading: don't wait at exit to flush the queue
    result_queue.cancel_join_thread()
    result_queue.close()


def _context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class WorkerPool:
    """`num_workers` processes fetching batches for one DataLoader (for one epoch, or for
    every epoch with `persistent_workers`)."""

    def __init__(self, fetch, dataset, num_workers, base_seed, worker_init_fn, timeout, context):
        ctx = context if context is not None else _context()
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self.num_workers = num_workers
        self.timeout = timeout
        self.result_queue = ctx.Queue()
        self.index_queues = []
        self.workers = []
        self.epoch = 0
        self.closed = False
        for worker_id in range(num_workers):
            index_queue = ctx.Queue()
            index_queue.cancel_join_thread()
            worker = ctx.Process(
                target=_worker_loop,
                args=(
                    fetch,
                    dataset,
                    index_queue,
                    self.result_queue,
                    worker_id,
                    num_workers,
                    base_seed + worker_id,
                    worker_init_fn,
                ),
                daemon=True,
            )
            worker.start()
            self.index_queues.append(index_queue)
            self.workers.append(worker)
        # stop the workers when the pool is dropped or the interpreter exits
        self._finalizer = weakref.finalize(
            self, _shutdown, self.workers, self.index_queues, self.result_queue
        )

    def send(self, worker_id: int, key, indices) -> None:
        self.index_queues[worker_id].put((key, indices))

    def receive(self):
        """The next (key, data) any worker finished; raises if a worker died or `timeout`
        seconds pass."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while True:
            wait = _STATUS_CHECK_INTERVAL
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            try:
                return pickle.loads(self.result_queue.get(timeout=wait))
            except queue.Empty:
                pass
            dead = [w for w in self.workers if not w.is_alive()]
            if dead:
                pids = ", ".join(str(w.pid) for w in dead)
                codes = ", ".join(str(w.exitcode) for w in dead)
                self.shutdown()
                raise RuntimeError(
                    f"DataLoader worker (pid(s) {pids}) exited unexpectedly (exit code {codes})"
                )
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")

    def shutdown(self) -> None:
        """Stop and join every worker (idempotent)."""
        self.closed = True
        self._finalizer()


def _shutdown(workers, index_queues, result_queue) -> None:
    for q in index_queues:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    for w in workers:
        w.join(timeout=2.0)
        if w.is_alive():  # stuck in the user's code: it has had its chance
            w.terminate()
            w.join()
    for q in (*index_queues, result_queue):
        q.cancel_join_thread()
        q.close()


class WorkerIterator:
    """One epoch of a DataLoader's batches, fetched by a WorkerPool, in the sampler's order
    (or as they come, with `in_order=False`)."""

    def __init__(self, pool: WorkerPool, batches, prefetch_factor: int, persistent: bool, in_order):
        self.pool = pool
        pool.epoch += 1  # a persistent pool's late answers from an abandoned epoch are dropped
        self.epoch = pool.epoch
        self.batches = enumerate(batches)
        self.persistent = persistent
        self.in_order = in_order
        self.sent = 0
        self.next_index = 0
        self.done = {}
        self.active = [True] * pool.num_workers  # False once a worker's stream ran out
        self.next_worker = 0
        for _ in range(prefetch_factor * pool.num_workers):
            if not self._send_one():
                break

    def _send_one(self) -> bool:
        if not any(self.active):
            return False
        try:
            index, indices = next(self.batches)
        except StopIteration:
            return False
        n = self.pool.num_workers
        while not self.active[self.next_worker]:  # round-robin over the workers left
            self.next_worker = (self.next_worker + 1) % n
        self.pool.send(self.next_worker, (self.epoch, index), indices)
        self.next_worker = (self.next_worker + 1) % n
        self.sent += 1
        return True

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.pool.closed or self.next_index >= self.sent:
                self._finish()
                raise StopIteration
            while not self._ready():
                (epoch, index), data = self.pool.receive()
                if epoch == self.epoch:
                    self.done[index] = data
            index = self.next_index if self.in_order else next(iter(self.done))
            data = self.done.pop(index)
            self.next_index += 1
            if not isinstance(data, _Exhausted):
                break
            self.active[data.worker_id] = False  # and its later answers say the same
        self._send_one()
        if isinstance(data, _WorkerError):
            data.reraise()
        return _from_host(data)

    def _ready(self) -> bool:
        return (self.next_index in self.done) if self.in_order else bool(self.done)

    def _finish(self) -> None:
        if not self.persistent:
            self.pool.shutdown()

    def __del__(self):
        if sys is not None and not self.persistent:  # sys is None at interpreter teardown
            self.pool.shutdown()
