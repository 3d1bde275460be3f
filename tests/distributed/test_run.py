"""The launcher's mpiexec command (threads per rank, hosts, root), and the API without MPI."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _mpi import needs_mpi

import fusegrad as fg
import fusegrad.distributed as dist
from fusegrad.distributed import run


def option(cmd, name):
    return cmd[cmd.index(name) + 1]


def test_threads_divide_the_cores_among_the_ranks_of_a_machine():
    assert run.threads_per_rank(1, [], 16) == 16
    assert run.threads_per_rank(2, [], 16) == 8
    assert run.threads_per_rank(3, [], 16) == 5
    assert run.threads_per_rank(4, [], 2) == 1  # never 0
    assert run.threads_per_rank(4, ["a", "b"], 8) == 4  # 2 ranks on each host
    assert run.threads_per_rank(3, ["a", "b"], 8) == 4  # the busier host has 2


def test_one_machine_command():
    cmd, env = run.mpiexec_command(2, ["train.py", "--ddp"], threads=3, python="/py")
    assert cmd[:3] == ["mpiexec", "-n", "2"]
    assert cmd[-4:] == ["/py", run.WATCHER, "train.py", "--ddp"]  # each rank under watch.py
    assert "FUSEGRAD_THREADS=3" in cmd and env["FUSEGRAD_THREADS"] == "3"
    assert option(cmd, "--bind-to") == "none" and "--oversubscribe" in cmd
    assert cmd[cmd.index("mpi_yield_when_idle") + 1] == "1"
    assert "--host" not in cmd
    cmd, _ = run.mpiexec_command(2, ["train.py"], threads=3, python="/py", watch=False)
    assert cmd[-2:] == ["/py", "train.py"]


def test_several_machines_command():
    cmd, _ = run.mpiexec_command(4, ["t.py"], hosts=["n1", "n2"], threads=2)
    assert option(cmd, "--host") == "n1:2,n2:2"
    assert "--oversubscribe" not in cmd and "FUSEGRAD_THREADS=2" in cmd


def test_dry_run_prints_the_command(capsys):
    assert run.main(["--nproc", "2", "--threads", "1", "--dry-run", "s.py", "--x", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mpiexec -n 2 ") and out.rstrip().endswith("s.py --x 1")


def test_bad_nproc():
    with pytest.raises(SystemExit):
        run.main(["--nproc", "0", "s.py"])


def test_importing_fusegrad_does_not_import_mpi4py():
    code = "import sys, fusegrad, fusegrad.nn.parallel; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_a_process_group_everything_says_so():
    assert not dist.is_initialized()
    for call in (dist.get_rank, dist.get_world_size, dist.barrier):
        with pytest.raises(dist.DistributedError, match="init_process_group"):
            call()
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        dist.all_reduce(fg.ones(2))
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        fg.nn.parallel.DistributedDataParallel(fg.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="'mpi' backend"):
        dist.init_process_group("nccl")


@needs_mpi
def test_the_launcher_runs_a_script_on_each_rank_with_its_threads(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(
        "import sys, fusegrad as fg, fusegrad.distributed as dist\n"
        "dist.init_process_group()\n"
        # one write per line: print() writes its arguments one by one, and the ranks' pieces
        # could interleave ('rankrank 1 of 2 ...')
        "line = f'rank {dist.get_rank()} of {dist.get_world_size()} threads {fg.config.threads}'\n"
        "sys.stdout.write(line + '\\n')\n"
        "sys.stdout.flush()\n"
        "dist.destroy_process_group()\n"
    )
    cmd = [sys.executable, "-m", "fusegrad.distributed.run", "--nproc", "2", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    threads = max(run.usable_cpus() // 2, 1)
    lines = sorted(line for line in out.stdout.splitlines() if line.startswith("rank"))
    assert lines == [f"rank {r} of 2 threads {threads}" for r in range(2)]
