"""The test session's summary says when the distributed tests were skipped for want of
MPI (tests/conftest.py), as it says when the CUDA kernels were not compiled."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _session(tmp_path, path: str) -> str:
    """A pytest run of one distributed test with `path` as PATH (CI unset: there a missing
    mpiexec is an error, not a skip)."""
    env = {**os.environ, "PATH": path, "CI": ""}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/distributed/test_ddp.py", "-k", "collectives"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done.stdout


def test_the_summary_says_the_distributed_tests_were_not_run_without_mpiexec(tmp_path):
    out = _session(tmp_path, str(tmp_path))  # an empty folder: no mpiexec on PATH
    assert "1 skipped" in out
    assert "distributed tests NOT run: mpiexec not found" in out


def test_the_summary_says_nothing_of_mpi_when_the_tests_did_not_skip_for_it(tmp_path):
    fake = tmp_path / "mpiexec"  # found on PATH: the test is not skipped for MPI
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    out = _session(tmp_path, str(tmp_path))
    assert "NOT run" not in out
