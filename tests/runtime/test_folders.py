"""A cache or dump folder that cannot be used is said once, naming its variable, and the
run carries on: FUSEGRAD_CACHE without the disk cache, FUSEGRAD_DUMP without dumping."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import compiler

_count = [0]


def _new_kernel() -> compiler.CompiledKernel:
    """A kernel no test compiled before (its own symbol, named in its code too: code the
    same as another's is compiled once), writing 7 into out[start]."""
    _count[0] += 1
    name = f"test_folders_{os.getpid()}_{_count[0]}"
    source = (
        f"@{name}_tag = private unnamed_addr constant i8 0\n"
        f"define void @{name}(i64 %start, i64 %end, ptr %out) {{\n"
        "  %at = getelementptr inbounds i64, ptr %out, i64 %start\n"
        "  store i64 7, ptr %at\n  ret void\n}\n"
    )
    return compiler.compile_kernel(source, name, 1)


def _runs(kernel) -> bool:
    out = np.zeros(1, dtype=np.int64)
    kernel.fn(0, 1, out.ctypes.data)
    return out[0] == 7


def _no_warning_from(make) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make()


def test_a_cache_path_that_is_a_file_warns_once_and_compiles_without_it(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file")
    with fg.config.override(cache=str(blocker)):
        with pytest.warns(UserWarning) as caught:
            k = _new_kernel()
        assert _runs(k) and k.cache == "compiled"
        _no_warning_from(_new_kernel)  # once
    (message,) = [str(w.message) for w in caught]
    assert f"FUSEGRAD_CACHE={str(blocker)!r}" in message
    assert "compiling without the disk cache" in message
    assert blocker.read_text() == "a file"


def test_a_cache_path_through_a_file_warns(tmp_path):
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / "file" / "cache")
    with fg.config.override(cache=path):
        with pytest.warns(UserWarning, match="FUSEGRAD_CACHE=.*without the disk cache"):
            assert _runs(_new_kernel())


def test_a_cache_folder_that_cannot_be_written_warns_once_and_still_runs(tmp_path, monkeypatch):
    def refuse(path, data):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(compiler, "write_atomic", refuse)
    folder = str(tmp_path / "readonly")
    with fg.config.override(cache=folder):
        with pytest.warns(UserWarning) as caught:
            k = _new_kernel()
        assert _runs(k)
        _no_warning_from(_new_kernel)
    (message,) = [str(w.message) for w in caught]
    assert f"FUSEGRAD_CACHE={folder!r}" in message and "PermissionError" in message
    assert "not saved" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_read_only_cache_folder_warns(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with fg.config.override(cache=str(folder)):
            with pytest.warns(UserWarning, match="FUSEGRAD_CACHE=.*not saved"):
                assert _runs(_new_kernel())
    finally:
        folder.chmod(0o700)


def test_a_dump_path_that_is_a_file_warns_once_and_the_run_carries_on(tmp_path):
    blocker = tmp_path / "dump_file"
    blocker.write_text("a file")
    with fg.config.override(dump=str(blocker)):
        with pytest.warns(UserWarning) as caught:
            got = (fg.ones(3, 11) * 5).sum(1).numpy()  # a new schedule: dumped
        np.testing.assert_array_equal(got, [55, 55, 55])

        def another():
            np.testing.assert_array_equal((fg.ones(2, 13) * 2).sum(1).numpy(), [26, 26])

        _no_warning_from(another)
    (w,) = caught
    assert f"FUSEGRAD_DUMP={str(blocker)!r}" in str(w.message)
    assert "kernels are not dumped" in str(w.message)
    assert w.filename == __file__  # at the user's line
    assert blocker.read_text() == "a file"


def test_a_dump_path_through_a_file_warns(tmp_path):
    (tmp_path / "file").write_text("x")
    with fg.config.override(dump=str(tmp_path / "file" / "dump")):
        with pytest.warns(UserWarning, match="FUSEGRAD_DUMP=.*NotADirectoryError"):
            np.testing.assert_array_equal((fg.ones(4, 17) + 1).numpy(), np.full((4, 17), 2))
