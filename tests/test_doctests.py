"""Every `>>>` example in fusegrad's modules runs and prints what its docstring says.

One test per module that has examples (`fusegrad.*`: the package maps frontend/, ir/,
pipeline/, runtime/ and nn/ to it, pyproject's package-dir). Examples that start a
process group (`init_process_group()`, one rank) run in a fresh interpreter, so that MPI
is neither started nor left behind in the test process; as tests/distributed's, they are
skipped only where MPI is not installed.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
import shutil
import subprocess
import sys

import pytest

import fusegrad as fg

PACKAGES = ["fusegrad", "fusegrad.ir", "fusegrad.pipeline", "fusegrad.runtime", "fusegrad.nn"]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NEEDS_MPI = "init_process_group("


def module_names() -> list[str]:
    names = set()
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names |= {package} | {m.name for m in pkgutil.walk_packages(path, package + ".")}
    return sorted(names)


def examples(name: str) -> list[doctest.DocTest]:
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    return [t for t in tests if t.examples]


MODULES = [name for name in module_names() if examples(name)]


def needs_mpi(name: str) -> bool:
    """Whether an example of module `name` starts a process group (marked `mpi`)."""
    return any(NEEDS_MPI in e.source for t in examples(name) for e in t.examples)


def run_examples(name: str) -> tuple[int, str]:
    """(failures, doctest's report) of module `name`'s examples, in this process."""
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    device = fg.get_default_device()
    fg.set_default_device("cpu")  # as a user's script starts (FUSEGRAD_TEST_DEVICE aside)
    try:
        for test in sorted(examples(name), key=lambda t: t.lineno or 0):
            runner.run(test, out=out.write)
    finally:
        fg.set_default_device(device)
    return runner.failures, out.getvalue()


def test_the_modules_with_examples_are_found():
    assert len(MODULES) > 60
    assert {"fusegrad", "fusegrad.ir.ops", "fusegrad.nn.parallel"} <= set(MODULES)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.mpi) if needs_mpi(n) else n for n in MODULES]
)
def test_examples(name):
    if needs_mpi(name):
        if shutil.which("mpiexec") is None:
            pytest.skip("mpiexec not found (apt-get install openmpi-bin libopenmpi-dev)")
        code = (
            "import doctest, importlib, sys; m = importlib.import_module(sys.argv[1]); "
            f"r = doctest.testmod(m, optionflags={FLAGS}); sys.exit(1 if r.failed else 0)"
        )
        cmd = [sys.executable, "-c", code, name]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    failures, report = run_examples(name)
    assert not failures, report


def test_a_wrong_example_fails(tmp_path, monkeypatch):
    (tmp_path / "wrong_example.py").write_text('"""\n>>> 1 + 1\n3\n"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    failures, report = run_examples("wrong_example")
    assert failures == 1 and "Expected:\n    3\nGot:\n    2" in report
