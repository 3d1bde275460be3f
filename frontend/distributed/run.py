"""Start a script on N processes with `mpiexec`, each with its share of the cores.

    python -m fusegrad.distributed.run --nproc 2 examples/lenet_mnist.py --ddp
    python -m fusegrad.distributed.run --nproc 4 --hosts node1,node2 train.py --epochs 3

Every rank runs the same Python (this interpreter's path) on the same script;
the script calls `fusegrad.distributed.init_process_group()`. Each rank's
`FUSEGRAD_THREADS` is the machine's cores divided by the ranks on that
machine (at least 1; `--threads` overrides), so N ranks on one machine do not
oversubscribe its cores. Ranks are not pinned to cores (`--bind-to none`):
their threads are counted instead; and a rank waiting for the others yields
its core rather than spinning (`--mca mpi_yield_when_idle 1`).

With `--hosts`, ranks are spread evenly over the hosts (Open MPI's
`--host h1:k,h2:k`): the hosts must reach each other by ssh without a
password, and have the same Python environment at the same path. The
launcher's core count is used for every host unless `--threads` is given.

Each rank runs under a watcher (watch.py, `--no-watch` turns it off): a rank
that ends without a word to the others (`os._exit`, a signal, a crash in
native code) is named, with its exit code or signal, as the job ends.

Open MPI refuses to run as root unless told to; the launcher tells it (as
containers and CI run as root). Extra `mpiexec` options go after `--mpi-args`.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys

WATCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "watch.py")


def usable_cpus() -> int:
    """The CPUs this process may run on (taskset, cgroups' cpusets), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def threads_per_rank(nproc: int, hosts: list[str], cpus: int) -> int:
    """Cores per rank on the busiest machine: cpus // ranks there, at least 1.

    >>> threads_per_rank(2, [], 16), threads_per_rank(3, [], 2), threads_per_rank(4, ["a", "b"], 8)
    (8, 1, 4)
    """
    per_host = math.ceil(nproc / max(len(hosts), 1))
    return max(cpus // per_host, 1)


def mpiexec_command(
    nproc: int,
    script_and_args: list[str],
    hosts: list[str] | None = None,
    threads: int | None = None,
    mpiexec: str = "mpiexec",
    extra: list[str] | None = None,
    python: str = sys.executable,
    watch: bool = True,
) -> tuple[list[str], dict[str, str]]:
    """The mpiexec command line and the environment to run it with (Open MPI's options)."""
    hosts = hosts or []
    if threads is None:
        threads = threads_per_rank(nproc, hosts, usable_cpus())
    cmd = [mpiexec, "-n", str(nproc), "--bind-to", "none"]
    # a rank waiting in a collective yields its core instead of spinning: on a shared or
    # busy machine the spinning took the time the other ranks needed (LeNet's DDP step
    # measured 75-80 ms spinning, 45-55 ms yielding, 2 ranks on a loaded 2-core machine)
    cmd += ["--mca", "mpi_yield_when_idle", "1"]
    if hosts:
        slots = math.ceil(nproc / len(hosts))
        cmd += ["--host", ",".join(f"{h}:{slots}" for h in hosts)]
    else:
        cmd += ["--oversubscribe"]  # the slot count is ours to decide: threads are divided
    cmd += ["-x", f"FUSEGRAD_THREADS={threads}", "-x", "PYTHONUNBUFFERED=1"]
    cmd += list(extra or [])
    cmd += [python, *([WATCHER] if watch else []), *script_and_args]
    env = dict(os.environ)
    env["FUSEGRAD_THREADS"] = str(threads)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return cmd, env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fusegrad.distributed.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--nproc", "--nproc-per-node", type=int, required=True, help="ranks in all")
    ap.add_argument("--hosts", default="", help="comma-separated host names (default: this one)")
    ap.add_argument("--threads", type=int, default=None, help="FUSEGRAD_THREADS of each rank")
    ap.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"))
    ap.add_argument("--mpi-args", default="", help="extra mpiexec options, as one string")
    ap.add_argument("--no-watch", action="store_true", help="run the ranks without watch.py")
    ap.add_argument("--dry-run", action="store_true", help="print the mpiexec command only")
    ap.add_argument("script", help="the Python script every rank runs")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = ap.parse_args(argv)
    if a.nproc < 1:
        ap.error(f"--nproc must be at least 1, got {a.nproc}")
    if a.threads is not None and a.threads < 1:
        ap.error(f"--threads must be at least 1, got {a.threads}")
    hosts = [h for h in a.hosts.split(",") if h]
    cmd, env = mpiexec_command(
        a.nproc,
        [a.script, *a.args],
        hosts,
        a.threads,
        a.mpiexec,
        shlex.split(a.mpi_args),
        watch=not a.no_watch,
    )
    if a.dry_run:
        print(shlex.join(cmd))
        return 0
    if shutil.which(a.mpiexec) is None:
        print(
            f"fusegrad.distributed.run: {a.mpiexec} not found; install Open MPI "
            "(apt-get install openmpi-bin libopenmpi-dev) and mpi4py (pip install -e .[mpi])",
            file=sys.stderr,
        )
        return 127
    code = subprocess.call(cmd, env=env)
    if code != 0:
        print(
            f"fusegrad.distributed.run: the job failed (mpiexec exit status {code}); "
            "the failing rank's error is above",
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
