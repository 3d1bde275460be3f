"""The compile cache, seen from outside: separate Python processes sharing a cache folder.

A kernel's object file is saved under FUSEGRAD_CACHE, so a second process
that builds the same kernels compiles nothing: every kernel line of
FUSEGRAD_DEBUG=1 says `[disk ...]`. The cache may never change an answer or
break a run: not when two processes fill it at once, not when a file in it
is cut short or overwritten, not when it cannot be written; and
FUSEGRAD_CACHE=off writes nothing at all.

Every run is a child process (so nothing is already in the in-memory cache),
and the children save their outputs so runs can be compared bit for bit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# builds a few typical expressions, realizes them together, saves every output
SCRIPT = """\
import sys

import numpy as np

import fusegrad as fg

fg.manual_seed(0)
x = fg.randn(4096)
a = fg.randn(64, 256)
b = fg.from_numpy(np.linspace(-1, 1, 256 * 32, dtype=np.float32).reshape(256, 32))
out = {
    "x": x,
    "a": a,
    "chain": (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x),
    "softmax": a.softmax(dim=1),
    "row_sum": a.sum(1),
    "matmul": a @ b,
    "transposed": (a.T * 2.0).sin() + b.amax(),
}
fg.realize(*out.values())
np.savez(sys.argv[1], **{name: t.numpy() for name, t in out.items()})
"""

STATUS = re.compile(r"\[(compiled|disk|memory)[\] ]")


class Run:
    """One finished child process: its kernel lines' cache statuses and its saved outputs."""

    def __init__(self, proc: subprocess.CompletedProcess, output: Path):
        assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        lines = [line for line in proc.stderr.splitlines() if line.startswith("fusegrad: ")]
        self.statuses = [STATUS.search(line).group(1) for line in lines if STATUS.search(line)]
        assert self.statuses, f"no kernel lines in the child's stderr:\n{proc.stderr[-3000:]}"
        with np.load(output) as saved:
            self.outputs = {name: saved[name] for name in saved.files}


def child_env(cache: str | Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env.update(FUSEGRAD_CACHE=str(cache), FUSEGRAD_DEBUG="1", **extra)
    return env


def start(tmp_path: Path, cache: str | Path, tag: str, cwd: Path | None = None, **env: str):
    script = tmp_path / "expressions.py"
    if not script.exists():
        script.write_text(SCRIPT)
    output = tmp_path / f"out_{tag}.npz"
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", str(script), str(output)],
        env=child_env(cache, **env),
        cwd=cwd or tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, output


def finish(started) -> Run:
    proc, output = started
    stdout, stderr = proc.communicate(timeout=120)
    return Run(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), output)


def run(tmp_path: Path, cache: str | Path, tag: str, cwd: Path | None = None, **env: str) -> Run:
    return finish(start(tmp_path, cache, tag, cwd, **env))


def same_outputs(a: Run, b: Run) -> bool:
    return a.outputs.keys() == b.outputs.keys() and all(
        a.outputs[k].dtype == b.outputs[k].dtype
        and a.outputs[k].shape == b.outputs[k].shape
        and a.outputs[k].tobytes() == b.outputs[k].tobytes()
        for k in a.outputs
    )


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def leftovers(cache: Path) -> list[Path]:
    """Temporary files a writer left behind (written, never renamed into place)."""
    return [p for p in files_under(cache) if ".tmp" in p.name or p.name.startswith("tmp")]


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A cache folder filled by one process from empty, and that process's run."""
    tmp = tmp_path_factory.mktemp("filled")
    cache = tmp / "cache"
    first = run(tmp, cache, "first")
    check_against_numpy(first.outputs)
    return cache, first


def check_against_numpy(out: dict[str, np.ndarray]) -> None:
    """The outputs are right, not only the same from run to run."""
    x, a = out["x"].astype(np.float64), out["a"].astype(np.float64)
    b = np.linspace(-1, 1, 256 * 32, dtype=np.float32).reshape(256, 32).astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    want = {
        "chain": np.maximum(np.exp(x * 0.5 + 1.0) * x - 3.0, 0.0) / (1 + x * x),
        "softmax": e / e.sum(axis=1, keepdims=True),
        "row_sum": a.sum(axis=1),
        "matmul": a @ b,
        "transposed": np.sin(a.T * 2.0) + b.max(),
    }
    assert np.isfinite(x).all() and np.isfinite(a).all()
    for name, value in want.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=1e-4, err_msg=name)


# ---------------------------------------------------------------- a second process


def test_the_first_process_compiles_and_saves_every_kernel(filled):
    cache, first = filled
    assert "compiled" in first.statuses
    assert "disk" not in first.statuses  # the folder started empty
    assert len(files_under(cache)) >= first.statuses.count("compiled")


def test_a_second_process_compiles_nothing_and_gets_the_same_outputs(filled, tmp_path):
    cache, first = filled
    second = run(tmp_path, cache, "second")
    assert "compiled" not in second.statuses, second.statuses
    # kernel for kernel: what the first process compiled, the second loaded from disk
    assert second.statuses == ["disk" if s == "compiled" else s for s in first.statuses]
    assert same_outputs(first, second)


def test_cache_files_are_written_whole_with_no_temporary_left_behind(filled):
    cache, _ = filled
    files = files_under(cache)
    assert files
    assert leftovers(cache) == []
    assert all(p.stat().st_size > 0 for p in files)


# ---------------------------------------------------------------- never broken


def test_processes_filling_an_empty_cache_at_once_all_succeed(filled, tmp_path):
    _, reference = filled
    cache = tmp_path / "cache"
    started = [start(tmp_path, cache, f"racer{i}") for i in range(3)]
    racers = [finish(s) for s in started]
    for r in racers:
        assert "compiled" in r.statuses or "disk" in r.statuses
        assert same_outputs(r, reference)
    assert leftovers(cache) == []
    after = run(tmp_path, cache, "after")
    assert "compiled" not in after.statuses
    assert same_outputs(after, reference)


def cut_short(data: bytes) -> bytes:
    return data[: len(data) // 2]  # what a writer that died halfway would leave


def emptied(data: bytes) -> bytes:
    return b""


def overwritten(data: bytes) -> bytes:
    return np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes()


def wrong_kernel(data: bytes) -> bytes:
    return b"\x7fELF" + data[4:][::-1]  # starts like an object file, is not one


@pytest.mark.parametrize("damage", [cut_short, emptied, overwritten, wrong_kernel])
def test_a_damaged_cache_file_is_never_used(filled, tmp_path, damage):
    cache, reference = filled
    damaged = tmp_path / "cache"
    shutil.copytree(cache, damaged)
    for p in files_under(damaged):
        p.write_bytes(damage(p.read_bytes()))
    again = run(tmp_path, damaged, "damaged")
    assert same_outputs(again, reference)


def test_a_cache_file_swapped_with_another_kernels_is_recompiled(filled, tmp_path):
    """Each file holds another kernel's whole, well-checksummed object: the checksum is of
    the key too, so every one is a miss (before, this ran the wrong code or crashed)."""
    cache, reference = filled
    swapped = tmp_path / "cache"
    shutil.copytree(cache, swapped)
    files = files_under(swapped)
    assert len(files) >= 2
    contents = [p.read_bytes() for p in files]
    for p, data in zip(files, contents[1:] + contents[:1]):
        p.write_bytes(data)
    again = run(tmp_path, swapped, "swapped")
    assert "disk" not in again.statuses, again.statuses
    assert same_outputs(again, reference)
    after = run(tmp_path, swapped, "after_swap")  # the misses were written back, right
    assert "compiled" not in after.statuses and same_outputs(after, reference)


def test_garbage_with_a_checksum_of_itself_is_a_miss(filled, tmp_path):
    """Garbage followed by its own sha256 (a checksum not bound to the key) is not loaded."""
    import hashlib

    cache, reference = filled
    forged = tmp_path / "cache"
    shutil.copytree(cache, forged)
    for p in files_under(forged):
        junk = b"\x7fELF" + overwritten(p.read_bytes())[4:-32]
        p.write_bytes(junk + hashlib.sha256(junk).digest())
    again = run(tmp_path, forged, "forged")
    assert "disk" not in again.statuses
    assert same_outputs(again, reference)


def test_a_cache_folder_that_cannot_be_written_only_costs_speed(filled, tmp_path):
    _, reference = filled
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    r = run(tmp_path, blocker, "unwritable")
    assert "disk" not in r.statuses
    assert same_outputs(r, reference)
    assert blocker.read_text() == "a file where the cache folder should be"


# ---------------------------------------------------------------- where it goes, and off


def test_cache_off_compiles_everything_and_writes_nothing(filled, tmp_path):
    _, reference = filled
    home, work, outdir = tmp_path / "home", tmp_path / "work", tmp_path / "out"
    for d in (home, work, outdir):
        d.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg")}
    for tag in ("off1", "off2"):
        r = run(outdir, "off", tag, cwd=work, **env)
        assert set(r.statuses) <= {"compiled", "memory"}, r.statuses
        assert r.statuses == reference.statuses  # the same kernels, each compiled again
        assert same_outputs(r, reference)
    assert files_under(home) == [] and files_under(work) == []
    assert not (home / "xdg").exists()


def test_the_default_cache_is_under_the_users_cache_folder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "expressions.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSEGRAD_", "XDG_"))}
    env.update(HOME=str(home))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out.npz")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    objects = list((home / ".cache" / "fusegrad").rglob("*.o"))
    assert objects, files_under(home)


# ---------------------------------------------------------------- loading compiled code


def test_a_kernel_that_calls_libc_does_not_break_the_kernels_loaded_after_it(tmp_path):
    """`x * 1.0` is an exact copy, which LLVM compiles to a call to memcpy through the GOT.

    Every kernel loaded into the JIT after it must still run and be right: kernels
    with constants (exp's and sin's polynomials) and a matmul, checked against numpy.
    """
    script = tmp_path / "copy_then_more.py"
    script.write_text(
        "import numpy as np\n"
        "import fusegrad as fg\n"
        "v = np.linspace(-3, 3, 1000, dtype=np.float32)\n"
        "x = fg.from_numpy(v)\n"
        "assert (x * 1.0).numpy().tolist() == v.tolist()\n"
        "np.testing.assert_allclose(x.exp().numpy(), np.exp(v), rtol=1e-5)\n"
        "np.testing.assert_allclose(x.sin().numpy(), np.sin(v), rtol=1e-5, atol=1e-6)\n"
        "for n in (4, 32, 64):\n"
        "    a = np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n)\n"
        "    got = (fg.from_numpy(a) @ fg.from_numpy(a.T.copy())).numpy()\n"
        "    np.testing.assert_allclose(got, a @ a.T, rtol=1e-5, atol=1e-5)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env["FUSEGRAD_CACHE"] = "off"
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stderr[-3000:]}"
