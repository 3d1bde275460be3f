"""How a rank's exit is known, without MPI: exits.py (the code of a SystemExit, caught or
not) and watch.py (a rank that ends without a word, named by its watcher)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fusegrad.distributed import exits, watch

REPORT = """
import atexit, sys
from fusegrad.distributed import exits
exits.install()
atexit.register(lambda: print("at exit:", exits.last_exit(), flush=True))
"""


def run_script(body: str) -> subprocess.CompletedProcess:
    code = REPORT + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "body, code, how",
    [
        ("raise SystemExit(5)", 5, exits.BY_SYSTEM_EXIT),
        ("sys.exit(3)", 3, exits.BY_SYS_EXIT),
        ("sys.exit('bye')", 1, exits.BY_SYS_EXIT),  # a message: printed, code 1
        ("exit(4)", 4, exits.BY_SYSTEM_EXIT),
        (  # one caught and dropped first, deep in a function: the uncaught one counts
            """
            def deep():
                try:
                    sys.exit(9)
                except SystemExit:
                    pass
                raise SystemExit(6)
            deep()
            """,
            6,
            exits.BY_SYSTEM_EXIT,
        ),
    ],
)
def test_the_uncaught_system_exit_is_the_one_at_exit(body, code, how):
    done = run_script(body)
    assert done.returncode == code
    assert done.stdout.strip() == f"at exit: ({code}, {how})", done.stderr


def test_names_a_script_took_before_install_are_replaced_too():
    code = (
        "import atexit\n"
        "from sys import exit as leave\n"
        "from fusegrad.distributed import exits\n"
        "exits.install(globals())\n"
        "atexit.register(lambda: print('at exit:', exits.last_exit(), flush=True))\n"
        "leave(6)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 6
    assert done.stdout.strip() == f"at exit: (6, {exits.BY_SYS_EXIT})", done.stderr


def test_a_script_that_ends_or_catches_its_exit_has_no_record():
    done = run_script(
        """
        try:
            sys.exit(3)
        except SystemExit as e:
            assert type(e).__name__ == "SystemExit" and e.code == 3
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "at exit: None", done.stderr


def test_uninstall_gives_the_builtins_back():
    import builtins

    before = builtins.SystemExit, sys.exit
    exits.install()
    try:
        assert issubclass(builtins.SystemExit, before[0]) and sys.exit is not before[1]
    finally:
        exits.uninstall()
    assert (builtins.SystemExit, sys.exit) == before


RANK = """
import os, signal, sys
from fusegrad.distributed.watch import tell_watcher
tell_watcher(b"j")
how = sys.argv[1]
if how == "os_exit":
    os._exit(7)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
tell_watcher(b"l")
sys.exit(3)
"""


def watched(how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "1"}
    cmd = [sys.executable, watch.__file__, "-c", RANK, how]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def test_the_watcher_names_a_rank_that_ends_without_a_word():
    done = watched("os_exit")
    assert done.returncode == 7
    assert "rank 1 (pid " in done.stderr
    assert "ended without leaving the process group: exit code 7 (os._exit(7)" in done.stderr
    done = watched("kill")
    assert done.returncode == -9  # the watcher ends as its rank did
    assert "killed by signal 9 (SIGKILL" in done.stderr and "rank 1 (pid " in done.stderr


def test_the_watcher_is_quiet_about_a_rank_that_left_through_python():
    done = watched("leave")
    assert done.returncode == 3 and done.stderr == ""
