"""One rank of the distributed tests: `mpiexec -n 2 python _ddp_worker.py CASE OUT_DIR [...]`.

Each case checks what only the ranks can see and writes its results to OUT_DIR
for the test (tests/distributed/test_ddp.py) to compare with a single process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np
from _ddp_models import global_batches, make_model, make_optimizer, parameters, train

import fusegrad as fg
import fusegrad.distributed as dist
from fusegrad.data import DistributedSampler
from fusegrad.nn.parallel import DistributedDataParallel


def train_case(out: str, kind: str, optimizer: str, micro: int, cap_mb: float) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # a different initialization on each rank: DDP must start every rank from rank 0's
    model = DistributedDataParallel(make_model(kind, seed=100 + rank), bucket_cap_mb=cap_mb)
    opt = make_optimizer(optimizer, model.parameters())
    calls = []
    reduce_arrays = dist.allreduce_arrays

    def counting(arrays, op="sum"):
        calls.append([int(a.size) for a in arrays])
        reduce_arrays(arrays, op)

    dist.allreduce_arrays = counting
    batches = global_batches(kind, steps=2, size=4 * world * micro)
    rows = list(DistributedSampler(range(len(batches[0][0])), shuffle=False))
    no_sync = model.no_sync if micro > 1 else None
    losses = train(model, opt, batches, rows=rows, micro=micro, no_sync=no_sync)
    np.savez(os.path.join(out, f"rank{rank}.npz"), **parameters(model.module))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"losses": losses, "calls": calls, "buckets": model.buckets}, f)


def no_sync_case(out: str) -> None:
    """Inside no_sync() the gradients stay local (they differ between ranks); after the
    next backward outside it they are averaged (equal on every rank)."""
    rank = dist.get_rank()
    model = DistributedDataParallel(fg.nn.Linear(6, 3))  # linear: d sum / d weight is sum(x)
    x = fg.full((2, 6), float(rank + 1))
    with model.no_sync():
        model(x).sum().backward()
    local = np.array(model.module.weight.grad.numpy())
    model(x).sum().backward()
    total = np.array(model.module.weight.grad.numpy())
    # a layer only rank 0 uses counts as zero on rank 1; one nobody uses keeps no gradient
    partial = DistributedDataParallel(_TwoHeads())
    partial(fg.ones(2, 6), use_b=rank == 0).sum().backward()
    b_grad = np.array(partial.module.b.weight.grad.numpy())
    unused = partial.module.c.weight.grad is None
    np.savez(
        os.path.join(out, f"rank{rank}.npz"), local=local, total=total, b=b_grad, unused=unused
    )


class _TwoHeads(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (fg.nn.Linear(6, 3) for _ in range(3))

    def forward(self, x, use_b):
        return self.a(x) + self.b(x) if use_b else self.a(x)


def collectives_case(out: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    t = fg.tensor([1.0, -2.0]) * (rank + 1)
    dist.all_reduce(t)
    s = t.tolist()
    t = fg.tensor([1.0, -2.0]) * (rank + 1)
    dist.all_reduce(t, op="mean")
    m = t.tolist()
    t = fg.tensor([float(rank), -float(rank)])
    dist.all_reduce(t, op="max")
    mx = t.tolist()
    w = fg.tensor([[float(rank)] * 3], requires_grad=True)
    dist.broadcast(w, src=world - 1)
    b, leaf = w.tolist(), w.is_leaf and w.requires_grad
    dist.barrier()
    errors = []
    try:  # shapes that differ between ranks: every rank raises, nobody hangs
        dist.all_reduce(fg.zeros(rank + 1))
    except fg.ShapeError as e:
        errors.append(str(e))
    try:
        dist.all_reduce(fg.tensor([1, 2]), op="mean")
    except fg.DTypeError as e:
        errors.append(str(e))
    jit_error = None
    model = DistributedDataParallel(make_model("mlp", seed=0))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)

    @fg.jit
    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    try:
        for _ in range(4):
            step(fg.ones(2, 6))
    except fg.JitError as e:
        jit_error = str(e)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "sum": s,
                "mean": m,
                "max": mx,
                "bcast": b,
                "leaf": leaf,
                "errors": errors,
                "jit": jit_error,
                "world": world,
            },
            f,
        )


def fault_case(out: str, how: str) -> None:
    rank = dist.get_rank()
    model = DistributedDataParallel(make_model("mlp", seed=0, width=16 + rank * (how == "shape")))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        if rank == 1 and step == 1:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "raise":
                raise RuntimeError("injected fault in rank 1")
            if how == "hang":
                time.sleep(120)
            if how.startswith("exit"):  # exit0, exit3: leaves while rank 0 waits for it
                sys.exit(int(how[4:]))
            if how.startswith("systemexit"):  # systemexit5: raise SystemExit(5)
                _raise_system_exit(int(how[10:]))
            if how.startswith("os_exit"):  # os_exit7: no Python runs, no word to rank 0
                os._exit(int(how[7:]))
            if how == "end":  # the end of its script, the group still open
                return
        opt.zero_grad()
        model(fg.ones(2, 6)).sum().backward()
        opt.step()
    print(f"rank {rank} finished", flush=True)


def _raise_system_exit(code: int) -> None:
    try:  # one caught first: not how the rank leaves
        raise SystemExit(2)
    except SystemExit:
        pass
    raise SystemExit(code)


def wait_cpu_case(out: str) -> None:
    """Rank 0 waits about 3 s in all_reduce for rank 1: how much CPU does it burn?"""
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(3.0)
    wall, cpu = time.monotonic(), time.process_time()  # all of the process's threads
    dist.all_reduce(fg.ones(4))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"wall": wall, "cpu": cpu}, f)


def stall_cpu_case(out: str) -> None:
    """Rank 1 stalls 6 s; rank 0 says (a file) when it starts waiting for it, so that the
    test can read the whole job's CPU time from /proc meanwhile."""
    rank = dist.get_rank()
    t = fg.ones(4)
    dist.all_reduce(t)  # everyone is up
    if rank == 1:
        time.sleep(6.0)
    else:
        open(os.path.join(out, "waiting"), "w").close()
    dist.all_reduce(t)


def leave_case(out: str, how: str) -> None:
    """Ranks that leave or disagree after the model is built (see test_ddp.py)."""
    rank = dist.get_rank()
    t = fg.ones(2)
    dist.all_reduce(t)
    if how == "destroy" and rank == 1:
        dist.destroy_process_group()  # leaves while rank 0 waits in the next all_reduce
        return
    if how == "mismatch" and rank == 1:
        dist.broadcast(t, src=0)  # rank 0 calls all_reduce
    if how == "late_exit3":  # every collective done: leaving now is no fault
        print(f"rank {rank} finished", flush=True)
        if rank == 1:
            sys.exit(3)
        return
    dist.all_reduce(t)
    print(f"rank {rank} finished", flush=True)


if __name__ == "__main__":
    case, out, *rest = sys.argv[1:]
    timeout = float(os.environ.get("DDP_TEST_TIMEOUT", "120"))
    dist.init_process_group(timeout=timeout)
    if case == "train":
        kind, optimizer, micro, cap = rest
        train_case(out, kind, optimizer, int(micro), float(cap))
    elif case == "no_sync":
        no_sync_case(out)
    elif case == "collectives":
        collectives_case(out)
    elif case == "wait_cpu":
        wait_cpu_case(out)
    elif case == "stall_cpu":
        stall_cpu_case(out)
    elif case in ("destroy", "mismatch", "late_exit3"):
        leave_case(out, case)
        sys.exit(0)  # the group still open: sys.exit(0) is an ordinary end
    else:
        fault_case(out, case)
    # as many PyTorch scripts do, no_sync and end end with the group still open
    if case not in ("no_sync", "end"):
        dist.destroy_process_group()
