"""Running the 2-rank worker from pytest: skipped only where MPI is not installed (never in CI)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_ddp_worker.py")


def _mpi_missing() -> str | None:
    if shutil.which("mpiexec") is None:
        return "mpiexec not found (apt-get install openmpi-bin libopenmpi-dev; .ci/run does)"
    return None  # with mpiexec present, a missing mpi4py is a failure, not a skip


MISSING = _mpi_missing()
if MISSING and os.environ.get("CI"):  # CI installs Open MPI: these tests must run there
    raise RuntimeError(f"CI=true but the distributed tests cannot run: {MISSING}")

needs_mpi = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def start_ranks(case: str, out, *args: str, nproc: int = 2, env=None) -> subprocess.Popen:
    """Start the worker on `nproc` ranks (1 thread each) through the launcher, in a session
    of its own (so that a hung job's mpiexec and ranks can all be ended)."""
    cmd = [sys.executable, "-m", "fusegrad.distributed.run", "--nproc", str(nproc)]
    cmd += ["--threads", "1", WORKER, case, str(out), *args]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def session_cpu_seconds(sid: int) -> float:
    """User and system CPU time of the live processes of session `sid`, from /proc."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[3]) == sid:  # (fields after the name: state ppid pgrp session ...)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def run_ranks(case: str, out, *args: str, nproc: int = 2, timeout: float = 240, env=None):
    """Run the worker on `nproc` ranks (1 thread each) through the launcher; returns
    (CompletedProcess, seconds). A job still running after `timeout` fails the test."""
    start = time.monotonic()
    job = start_ranks(case, out, *args, nproc=nproc, env=env)
    cmd = job.args
    try:
        stdout, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate()
        pytest.fail(f"{case}: the job hung for more than {timeout} s:\n{stderr}")
    done = subprocess.CompletedProcess(cmd, job.returncode, stdout, stderr)
    return done, time.monotonic() - start
