"""The suite's own layout: its markers are registered and given by tests/_markers.py's
rules, `scripts/test.sh --quick` leaves out registered markers only, test files are named
for what they cover, and docs/TESTING.md lists exactly the modules without a test file of
their own."""

from __future__ import annotations

import re
import shlex
import sys
import types
from types import SimpleNamespace

import _markers
from _markers import (
    EMULATOR_FILES,
    EMULATOR_UNIT_TESTS,
    MARKERS,
    SLOW,
    TESTS,
    markers_of,
    reads,
    reads_torch,
    torch_line,
)

ROOT = TESTS.parent
# source folder -> its package's test folder (fusegrad.distributed lives in frontend/)
PACKAGES = {
    "frontend": "frontend",
    "frontend/distributed": "distributed",
    "ir": "ir",
    "pipeline": "pipeline",
    "runtime": "runtime",
    "nn": "nn",
    "datasets": "datasets",
}


def test_every_marker_is_registered_and_unknown_ones_are_refused(pytestconfig):
    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    assert set(MARKERS) | {"cpu_device", "backend_slice"} <= registered
    assert "--strict-markers" in pytestconfig.getini("addopts")


def test_quick_leaves_out_registered_markers_and_no_nvcc_sweep():
    script = (ROOT / "scripts" / "test.sh").read_text()
    quick = [line for line in script.splitlines() if "pytest" in line and '-m "' in line]
    assert len(quick) == 1, quick
    words = shlex.split(quick[0].strip().removeprefix("exec "))
    expression = words[words.index("-m", words.index("pytest")) + 1]
    named = set(re.findall(r"[a-z_]+", expression)) - {"not", "and", "or"}
    assert named == {"slow", "emulator", "mpi"}, expression
    assert "nvcc_all" not in quick[0]


def _item(where: str, name: str = "test_x", fixtures=(), skipif_reasons=(), function=None):
    """A stand-in for a collected test at tests/`where`."""
    marks = [SimpleNamespace(kwargs={"reason": r}) for r in skipif_reasons]
    return SimpleNamespace(
        path=TESTS / where,
        name=name,
        originalname=name,
        fixturenames=list(fixtures),
        iter_markers=lambda kind: iter(marks if kind == "skipif" else []),
        function=function,
    )


def test_markers_by_folder_fixture_and_skip_reason():
    assert markers_of(_item("distributed/test_ddp.py")) == {"mpi"}
    assert markers_of(_item("ir/test_node.py")) == set()
    assert markers_of(_item("frontend/test_copying.py", fixtures=["emulated"])) == {"emulator"}
    assert markers_of(_item("pipeline/test_cuda_memory.py", fixtures=["ptx"])) == {"nvcc"}
    nvcc_gated = _item("pipeline/test_cuda.py", skipif_reasons=["nvcc is not installed"])
    assert markers_of(nvcc_gated) == {"nvcc"}
    assert markers_of(_item("pipeline/test_cuda.py", skipif_reasons=["no AMX"])) == set()
    for where in EMULATOR_FILES:
        assert "emulator" in markers_of(_item(where))


def test_a_test_whose_fixture_or_helper_runs_the_emulator_is_marked(monkeypatch):
    module = types.ModuleType("_emulator_samples")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    source = (
        "def compiled():\n    return EmulatedModule('')\n"
        "def plain():\n    return 1\n"
        "def by_helper():\n    return compiled()\n"
    )
    exec(compile(source, str(TESTS / "_emulator_samples.py"), "exec"), module.__dict__)
    fixture = SimpleNamespace(func=module.compiled)
    item = _item("pipeline/test_x.py", function=module.plain)
    assert markers_of(item) == set()
    item._fixtureinfo = SimpleNamespace(name2fixturedefs={"compiled": [fixture]})
    assert markers_of(item) == {"emulator"}
    assert markers_of(_item("pipeline/test_x.py", function=module.by_helper)) == {"emulator"}


def test_the_emulators_own_unit_tests_are_kept_for_quick():
    for where in EMULATOR_UNIT_TESTS:
        assert "emulator" not in markers_of(_item(where, fixtures=["emulated"]))


def test_slow_by_file_and_by_test():
    file_wide = next(s for s in SLOW if "::" not in s)
    assert "slow" in markers_of(_item(file_wide, name="test_anything"))
    one = next(s for s in SLOW if "::" in s)
    where, name = one.split("::")
    assert "slow" in markers_of(_item(where, name=name))
    assert "slow" not in markers_of(_item(where, name=name + "_not"))


def test_every_slow_entry_names_a_test_that_exists():
    for entry in SLOW:
        where, _, name = entry.partition("::")
        path = TESTS / where
        assert path.exists(), entry
        if name:
            assert re.search(rf"^def {name}\(", path.read_text(), re.M), entry


# test functions that read torch, and one that does not, compiled from text into a module
# of their own (written here as functions, this file's tests would read torch themselves)
SAMPLES = """
import pytest

def plain():
    return "torch"  # a string is not the module

def imports():
    import torch

def skips():
    torch = pytest.importorskip("torch")
    return torch

def nested():
    return lambda: torch

def _helper():
    try:
        import torch
    except ImportError:
        return None
    return torch

def by_helper():
    return _helper()
"""


def test_torch_is_read_directly_through_a_nested_function_or_a_helper(monkeypatch):
    module = types.ModuleType("_torch_reading_samples")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(SAMPLES, str(TESTS / "_torch_reading_samples.py"), "exec"), module.__dict__)
    assert not reads_torch(module.plain)
    for name in ("imports", "skips", "nested", "by_helper"):
        assert reads_torch(getattr(module, name)), name
    assert reads(module.by_helper, {"_helper"}) and not reads(module.plain, {"np"})


def _report(nodeid, outcome, torch_marked=True, reason="", when="call"):
    return SimpleNamespace(
        nodeid=nodeid,
        keywords={"torch": 1} if torch_marked else {},
        skipped=outcome == "skipped",
        when=when,
        longrepr=("file", 1, f"Skipped: {reason}") if outcome == "skipped" else None,
    )


def test_the_summary_counts_the_torch_cross_checks_not_run(monkeypatch):
    monkeypatch.setattr(_markers, "_torch_installed", lambda: False)
    stats = {
        "passed": [_report("a", "passed"), _report("b", "passed", torch_marked=False)],
        "skipped": [
            _report("c", "skipped", reason="could not import 'torch'", when="setup"),
            _report("d", "skipped", reason="nvcc is not installed", when="setup"),
            _report("e", "skipped", reason="compares with PyTorch", when="setup"),
        ],
    }
    line = torch_line(stats)
    assert line == (
        "torch cross-checks NOT run: torch is not installed (2 skipped, "
        "1 more ran without their comparison with torch)"
    )
    assert torch_line({"passed": [_report("b", "passed", torch_marked=False)]}) is None
    monkeypatch.setattr(_markers, "_torch_installed", lambda: True)
    assert torch_line(stats) is None


# what a file named for when or how its tests came looks like (test_habits_probe2.py,
# test_more_ops.py, test_special_points_added.py)
HISTORY = re.compile(r"probe|_more(_|\.py)|_added|[a-z]\d\.py$|_new|_session|_extra")


def test_test_files_are_named_for_what_they_cover_not_their_history():
    modules = {m.name for source in PACKAGES for m in (ROOT / source).glob("*.py")}
    named = [p for p in TESTS.rglob("test_*.py") if p.name.removeprefix("test_") not in modules]
    assert [p for p in named if HISTORY.search(p.name)] == []
    assert HISTORY.search("test_habits_probe2.py") and HISTORY.search("test_more_ops.py")
    assert not HISTORY.search("test_dpbf16.py")


def modules_without_a_test_file() -> list[str]:
    """`folder/module.py` for each module of the package with no tests/<package>/
    test_<module>.py."""
    missing = []
    for source, tests in PACKAGES.items():
        for module in sorted((ROOT / source).glob("*.py")):
            if module.name == "__init__.py":
                continue
            if not (TESTS / tests / f"test_{module.name}").exists():
                missing.append(f"{source}/{module.name}")
    return missing


def test_docs_testing_lists_exactly_the_modules_without_a_test_file():
    text = (ROOT / "docs" / "TESTING.md").read_text()
    section = text[text.index("## Modules without a test file of their own") :]
    listed = set(re.findall(r"^- `([a-z0-9_/]+\.py)`", section, re.M))
    missing = set(modules_without_a_test_file())
    assert listed == missing, (
        f"add to docs/TESTING.md: {sorted(missing - listed)}; "
        f"take out (they have a test file now): {sorted(listed - missing)}"
    )


def test_a_failing_test_is_written_down_as_it_fails(tmp_path):
    import _failures

    path = str(tmp_path / "failures.txt")
    report = SimpleNamespace(
        failed=True,
        nodeid="tests/nn/test_x.py::test_y",
        when="call",
        longrepr="Traceback ...\nE   AssertionError: 1.5 != 2.0",
    )
    _failures.append(report, path)
    _failures.append(SimpleNamespace(failed=False, nodeid="ok", when="call", longrepr=None), path)
    _failures.append(SimpleNamespace(failed=True, nodeid="t::z", when="setup", longrepr=None), path)
    crash = SimpleNamespace(reprcrash=SimpleNamespace(message="assert 1 == 2\n +  where"))
    _failures.append(SimpleNamespace(failed=True, nodeid="t::c", when="call", longrepr=crash), path)
    # pytest-xdist's controller gets each worker's report too: the worker wrote it down
    copy = SimpleNamespace(failed=True, nodeid="t::w", when="call", longrepr=None, node="gw0")
    _failures.append(copy, path)
    assert open(path).read().splitlines() == [
        "tests/nn/test_x.py::test_y [call] E   AssertionError: 1.5 != 2.0",
        "t::z [setup] ",
        "t::c [call] assert 1 == 2",
    ]
