"""DistributedDataParallel on 2 ranks (mpiexec, one thread each) against one process.

Each rank starts from a different initialization and trains on its half of
each global batch; the parameters after two steps must equal, to float
rounding, those of one process training on the whole batches from rank 0's
initialization, and be bitwise equal between the ranks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import numpy as np
import pytest
from _ddp_models import global_batches, make_model, make_optimizer, parameters, train
from _mpi import needs_mpi, run_ranks, session_cpu_seconds, start_ranks

pytestmark = needs_mpi


def oracle(kind: str, optimizer: str, size: int, micro: int = 1):
    model = make_model(kind, seed=100)  # rank 0's initialization
    opt = make_optimizer(optimizer, model.parameters())
    train(model, opt, global_batches(kind, steps=2, size=size), micro=micro)
    return parameters(model)


def check_ranks_match_oracle(out, kind, optimizer, size, micro=1):
    want = oracle(kind, optimizer, size, micro)
    ranks = [np.load(out / f"rank{r}.npz") for r in range(2)]
    for name, value in want.items():
        assert np.array_equal(ranks[0][name], ranks[1][name]), name
        np.testing.assert_allclose(ranks[0][name], value, rtol=2e-5, atol=2e-6, err_msg=name)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize(
    "kind, optimizer, micro, cap_mb",
    [
        ("mlp", "sgd", 1, 25.0),
        ("mlp", "adam", 2, 25.0),  # accumulation over two micro-batches with no_sync()
        ("mlp", "sgd", 1, 100e-6),  # 105 bytes: several buckets
        ("lenet", "sgd", 1, 25.0),
    ],
)
def test_ddp_step_equals_one_process_on_the_global_batch(tmp_path, kind, optimizer, micro, cap_mb):
    done, _ = run_ranks("train", tmp_path, kind, optimizer, str(micro), str(cap_mb))
    assert done.returncode == 0, done.stderr
    infos = check_ranks_match_oracle(tmp_path, kind, optimizer, size=8 * micro, micro=micro)
    buckets = infos[0]["buckets"]
    n_params = len(parameters(make_model(kind, seed=0)))
    assert sorted(i for b in buckets for i in b) == list(range(n_params))
    # per step: one tiny call (which parameters have gradients), then one all-reduce per
    # bucket, all in one call: never one per parameter, and none for no_sync() passes
    calls = infos[0]["calls"]
    assert len(calls) == 2 * 2
    for flags, grads in zip(calls[::2], calls[1::2]):
        assert flags == [n_params]
        assert len(grads) == len(buckets)
        assert sum(grads) == sum(p.size for p in parameters(make_model(kind, 0)).values())
    if cap_mb < 1e-3:
        # reverse order; bytes 12 (2.bias), 192, 64, 384: no two fit together in 105
        assert buckets == [[3], [2], [1], [0]]
    else:
        assert len(buckets) == 1


def test_no_sync_and_parameters_without_gradients(tmp_path):
    # the ranks end their scripts without destroy_process_group(): the job ends normally
    done, _ = run_ranks("no_sync", tmp_path)
    assert done.returncode == 0, done.stderr
    r0, r1 = (np.load(tmp_path / f"rank{r}.npz") for r in range(2))
    # the input is all (rank + 1), and a linear layer's weight gradient is the inputs' sum
    np.testing.assert_allclose(r0["local"], np.full((3, 6), 2.0))
    np.testing.assert_allclose(r1["local"], np.full((3, 6), 4.0))
    # then each rank has twice its local gradient, and the average is (2*2 + 2*4) / 2
    np.testing.assert_allclose(r0["total"], r1["total"])
    np.testing.assert_allclose(r0["total"], 3 * r0["local"], rtol=1e-6)
    # a layer used on rank 0 only: its gradient (2 per element) averaged with rank 1's zero
    for r in (r0, r1):
        np.testing.assert_allclose(r["b"], np.full((3, 6), 1.0))
        assert r["unused"]  # used on no rank: no gradient, as in one process


def test_collectives(tmp_path):
    done, _ = run_ranks("collectives", tmp_path)
    assert done.returncode == 0, done.stderr
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["world"] == 2
        assert got["sum"] == [3.0, -6.0]
        assert got["mean"] == [1.5, -3.0]
        assert got["max"] == [1.0, 0.0]
        assert got["bcast"] == [[1.0, 1.0, 1.0]]  # from the last rank
        assert got["leaf"]  # a parameter stays the same leaf after a broadcast
        shape_error, dtype_error = got["errors"]
        assert "all_reduce" in shape_error and "(1,)" in shape_error and "(2,)" in shape_error
        assert "mean" in dtype_error and "int64" in dtype_error
        assert got["jit"] is not None  # a DDP step inside fg.jit is refused


@pytest.mark.parametrize(
    "how, message",
    [
        ("kill", "signal 9"),
        ("raise", "injected fault in rank 1"),
        ("hang", "rank 1 did not reach allreduce_arrays #"),
        (
            "shape",
            "'0.weight' has shape (16, 6) (float32) on rank 0 but '0.weight' has shape (17, 6)",
        ),
    ],
)
def test_a_failing_rank_ends_the_job_with_an_error(tmp_path, how, message):
    """A rank killed, raising, stuck (past the group's timeout, 5 s here) or built with
    other shapes: the job exits non-zero, with the reason, in bounded time."""
    done, seconds = run_ranks(how, tmp_path, timeout=120, env={"DDP_TEST_TIMEOUT": "5"})
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "rank 0 finished" not in done.stdout
    assert seconds < 60


@pytest.mark.parametrize(
    "how, message, code",
    [
        ("exit0", "rank 1 left the job through sys.exit(0) (exit code 0)", 1),
        ("exit3", "rank 1 left the job through sys.exit(3) (exit code 3)", 3),
        ("systemexit5", "rank 1 left the job through raise SystemExit(5) (exit code 5)", 5),
        ("end", "rank 1 left the job: its script ended (exit code 0)", 1),
    ],
)
def test_a_rank_that_exits_early_ends_the_job_at_once(tmp_path, how, message, code):
    """Rank 1 leaves (sys.exit with any code, or the end of its script) while rank 0 waits
    for it in an all_reduce: rank 0 raises within seconds, not after the group's timeout
    (60 s here), naming rank 1 and its code, and the job exits with that code (1 for 0)."""
    done, _ = run_ranks(how, tmp_path, timeout=45, env={"DDP_TEST_TIMEOUT": "60"})
    assert message in done.stderr, done.stderr
    assert "allreduce_arrays #" in done.stderr and "rank 0 waited" in done.stderr
    waited = float(re.search(r"rank 0 waited ([0-9.]+) s", done.stderr).group(1))
    assert waited < 10
    assert done.returncode == code, done.stderr
    assert "rank 0 finished" not in done.stdout


@pytest.mark.parametrize(
    "how, ending, code",
    [
        ("os_exit7", "exit code 7 (os._exit(7)", 7),
        ("os_exit0", "exit code 0 (os._exit(0)", 1),  # mpiexec: 'exiting improperly'
        ("kill", "killed by signal 9 (SIGKILL", 128 + 9),
    ],
)
def test_a_rank_that_ends_without_a_word_is_named_with_its_code(tmp_path, how, ending, code):
    """Rank 1 ends running no Python (os._exit, SIGKILL) while rank 0 waits for it: its
    watcher (watch.py) names it with its code or signal, and the job ends within
    seconds, not after the group's timeout (60 s here)."""
    done, seconds = run_ranks(how, tmp_path, timeout=45, env={"DDP_TEST_TIMEOUT": "60"})
    named = r"rank 1 \(pid \d+\) ended without leaving the process group: "
    assert re.search(named + re.escape(ending), done.stderr), done.stderr
    assert done.returncode == code, done.stderr
    assert "rank 0 finished" not in done.stdout
    assert seconds < 30


def test_a_waiting_rank_sleeps_instead_of_spinning(tmp_path):
    done, _ = run_ranks("wait_cpu", tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads((tmp_path / "rank0.json").read_text())
    assert got["wall"] > 2.0  # it did wait for rank 1's 3 s
    # spinning (MPI's blocking all-reduce) is about 1.0 of a core
    assert got["cpu"] / got["wall"] < 0.2, got


def test_a_stalled_job_burns_no_cpu(tmp_path):
    """While rank 1 stalls and rank 0 waits for it, the whole job (launcher, mpiexec, the
    watchers and both ranks, read from /proc) uses under a tenth of a core (spinning with
    sched_yield took 0.3 on a loaded 2-core machine, a whole core on an idle one)."""
    job = start_ranks("stall_cpu", tmp_path, env={"DDP_TEST_TIMEOUT": "60"})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "waiting").exists():
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.05)
        time.sleep(0.2)
        wall, cpu = time.monotonic(), session_cpu_seconds(job.pid)
        time.sleep(2.0)
        wall, cpu = time.monotonic() - wall, session_cpu_seconds(job.pid) - cpu
        assert cpu / wall < 0.1, f"the job used {cpu / wall:.2f} of a core while waiting"
        _, stderr = job.communicate(timeout=60)
        assert job.returncode == 0, stderr
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def test_a_rank_that_leaves_the_group_or_calls_another_collective_is_named(tmp_path):
    done, _ = run_ranks("destroy", tmp_path, timeout=45, env={"DDP_TEST_TIMEOUT": "60"})
    assert done.returncode == 1
    assert "rank 1 left the group (destroy_process_group()) without reaching all_reduce #" in (
        done.stderr
    )
    done, _ = run_ranks("mismatch", tmp_path, timeout=45, env={"DDP_TEST_TIMEOUT": "60"})
    assert done.returncode == 1
    assert "called broadcast as the group's collective #2 while rank" in done.stderr, done.stderr
    assert "rank 0 finished" not in done.stdout


def test_ranks_that_leave_after_their_last_collective_end_the_job_normally(tmp_path):
    """sys.exit on every rank (rank 1 with code 3) once all collectives are done, the
    group still open: no error, and the job's exit status is rank 1's."""
    done, _ = run_ranks("late_exit3", tmp_path, timeout=45, env={"DDP_TEST_TIMEOUT": "60"})
    assert done.returncode == 3, done.stderr
    assert "DistributedError" not in done.stderr and "aborting" not in done.stderr
    # mpiexec forwards both ranks' output through one pipe: lines may run together
    finished = sorted(re.findall(r"rank \d finished", done.stdout))
    assert finished == ["rank 0 finished", "rank 1 finished"]
