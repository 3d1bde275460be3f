"""The disk cache's bound (pipeline/cache_bound.py): past FUSEGRAD_CACHE_LIMIT the entries
used least recently go, down to three quarters of it; the recently used, the autotuner's
choices and the emulator's runtime stay; a read refreshes an entry's time; a process that
writes looks at the size on a thread of its own, at most once an hour at its first write;
and a trimmed entry is only a miss: the next run compiles it again, with the same values."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fusegrad.pipeline import cache_bound, compiler
from fusegrad.runtime.config import config

HOUR = 3600.0


def _entry(path: Path, size: int, age: float) -> Path:
    """A cache file of `size` bytes last used `age` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def _present(paths) -> set[str]:
    return {p.name for p in paths if p.exists()}


def test_the_least_recently_used_go_down_to_three_quarters_of_the_bound(tmp_path):
    # ten entries of 100 bytes, the first used longest ago; a bound of 800 bytes
    entries = [_entry(tmp_path / f"{i:02x}" / f"e{i}.o", 100, HOUR * (10 - i)) for i in range(10)]
    before, after = cache_bound.trim(str(tmp_path), 800)
    assert (before, after) == (1000, 600)
    assert _present(entries) == {f"e{i}.o" for i in range(4, 10)}


def test_nothing_goes_under_the_bound_but_stale_temporary_files(tmp_path):
    kept = [_entry(tmp_path / "ab" / f"e{i}.pkl", 100, 30 * 24 * HOUR) for i in range(3)]
    stale = _entry(tmp_path / "ab" / "half.tmp", 50, 2 * HOUR)
    writing = _entry(tmp_path / "ab" / "now.tmp", 50, 1.0)  # another process's, being written
    assert cache_bound.trim(str(tmp_path), 10_000) == (300, 300)
    assert _present(kept) == {"e0.pkl", "e1.pkl", "e2.pkl"}
    assert not stale.exists() and writing.exists()


def test_recent_entries_the_autotuners_choices_and_the_emulators_runtime_stay(tmp_path):
    old = _entry(tmp_path / "items" / "aa" / "old.pkl", 100, 5 * HOUR)
    recent = _entry(tmp_path / "items" / "aa" / "recent.pkl", 100, 60.0)
    choices = _entry(tmp_path / "autotune" / "host.json", 100, 50 * HOUR)
    runtime = _entry(tmp_path / "cuda_emu" / "runtime-0123.so", 100, 50 * HOUR)
    header = _entry(tmp_path / "cuda_emu" / "pch-0123" / "cuda_emu.h.gch", 100, 50 * HOUR)
    module = _entry(tmp_path / "cuda_emu" / "ab" / "ab12.so", 100, 40 * HOUR)
    before, after = cache_bound.trim(str(tmp_path), 1)  # everything is over a 1-byte bound
    assert (before, after) == (300, 100)  # only the trimmable ones counted: old, recent, module
    assert recent.exists() and choices.exists() and runtime.exists() and header.exists()
    assert not old.exists() and not module.exists()


def test_a_look_cut_short_leaves_no_stamp_so_the_next_process_looks_again(tmp_path, monkeypatch):
    [_entry(tmp_path / "aa" / f"e{i}.o", 100, 5 * HOUR) for i in range(4)]

    def ended(path):  # the process ends while the look deletes (a daemon thread)
        raise SystemExit

    monkeypatch.setattr(cache_bound, "_remove", ended)
    with pytest.raises(SystemExit):
        cache_bound.trim(str(tmp_path), 100)
    assert not (tmp_path / cache_bound.STAMP).exists()
    monkeypatch.undo()
    assert cache_bound.trim(str(tmp_path), 100) == (400, 0)
    assert (tmp_path / cache_bound.STAMP).exists()


def test_a_read_makes_an_old_entry_recent(tmp_path):
    obj = b"object file"
    path = tmp_path / "ab" / "key.o"
    path.parent.mkdir()
    path.write_bytes(obj + compiler._seal("key", obj))
    then = time.time() - 2 * HOUR
    os.utime(path, (then, then))
    assert compiler._read_cached(str(path), "key") == obj
    assert time.time() - path.stat().st_mtime < 60


@pytest.fixture
def bounded(tmp_path, monkeypatch):
    """This process's cache is `tmp_path`, bounded at 1 MB, never looked at before."""
    monkeypatch.setattr(config, "cache", str(tmp_path))
    monkeypatch.setattr(config, "cache_limit_mb", 1)
    monkeypatch.setattr(cache_bound, "_looked", False)
    monkeypatch.setattr(cache_bound, "_written", 0)
    monkeypatch.setattr(cache_bound, "_thread", None)
    return tmp_path


def _waited() -> None:
    if cache_bound._thread is not None:
        cache_bound._thread.join(timeout=60)
        assert not cache_bound._thread.is_alive()


def test_a_writing_process_trims_at_its_first_write_and_after_an_eighth_of_the_bound(bounded):
    old = [_entry(bounded / "aa" / f"e{i}.o", 300_000, HOUR * (10 - i)) for i in range(4)]
    compiler.write_atomic(str(bounded / "bb" / "new.o"), b"y" * 1000)
    _waited()
    # 1.2 MB + 1 kB over a 1 MiB bound: down to 786 kB, the oldest first
    assert _present(old) == {"e2.o", "e3.o"}
    assert (bounded / cache_bound.STAMP).exists() and (bounded / "bb" / "new.o").exists()
    # more old entries: not looked at again until an eighth of the bound is written
    more = [_entry(bounded / "cc" / f"m{i}.o", 300_000, 20 * HOUR) for i in range(2)]
    compiler.write_atomic(str(bounded / "bb" / "small.o"), b"y" * 1000)
    _waited()
    assert _present(more) == {"m0.o", "m1.o"}
    compiler.write_atomic(str(bounded / "bb" / "large.o"), b"y" * (1 << 17))
    _waited()
    assert _present(more) == set()


def test_a_new_process_does_not_look_when_another_looked_within_the_hour(bounded):
    (bounded / cache_bound.STAMP).touch()
    old = [_entry(bounded / "aa" / f"e{i}.o", 600_000, 10 * HOUR) for i in range(3)]
    compiler.write_atomic(str(bounded / "bb" / "new.o"), b"y" * 1000)
    _waited()
    assert _present(old) == {"e0.o", "e1.o", "e2.o"}


def test_no_bound_no_look(bounded, monkeypatch):
    monkeypatch.setattr(config, "cache_limit_mb", 0)
    old = [_entry(bounded / "aa" / f"e{i}.o", 600_000, 10 * HOUR) for i in range(3)]
    compiler.write_atomic(str(bounded / "bb" / "new.o"), b"y" * 1000)
    assert cache_bound._thread is None
    assert _present(old) == {"e0.o", "e1.o", "e2.o"}


SCRIPT = """\
import sys
import numpy as np
import fusegrad as fg
x = fg.from_numpy(np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64))
y = ((x * 1.5).exp() - x).softmax(dim=1) @ x
np.save(sys.argv[1], y.numpy())
"""


def test_a_trimmed_entry_is_compiled_again_with_the_same_values(tmp_path):
    cache = tmp_path / "cache"
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env.update(FUSEGRAD_CACHE=str(cache), FUSEGRAD_DEBUG="1")

    def run(tag: str) -> tuple[np.ndarray, str]:
        out = tmp_path / f"{tag}.npy"
        proc = subprocess.run(
            [sys.executable, str(script), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return np.load(out), proc.stderr

    first, _ = run("first")
    then = time.time() - 2 * HOUR
    for folder, _, names in os.walk(cache):
        for name in names:
            os.utime(os.path.join(folder, name), (then, then))
    before, after = cache_bound.trim(str(cache), 1)
    assert before > 0 and after == 0
    second, log = run("second")
    assert "[compiled" in log and "[disk" not in log
    np.testing.assert_array_equal(first, second)
