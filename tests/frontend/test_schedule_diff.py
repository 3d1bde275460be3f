"""`python -m fusegrad.schedule_diff A B`: planted differences between two dumps of one
program (a scheduling rule switched off for one of them, a constant changed) come out as
the right merged, split, added and removed rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import schedule as schedule_module
from fusegrad.runtime.engine import engine
from fusegrad.schedule_diff import diff_dumps, main, read_dump


def _program(g, h, scale=2.0):
    """Two sums over one input (rule 7 of pipeline/schedule.py, sibling reductions, merges
    them into one kernel) and an elementwise kernel no rule changes."""
    a = g.sum(0)
    b = (g * h).sum(0)
    c = (h * scale).exp()
    return a, b, c


def _dump(folder, siblings=True, scale=2.0):
    rng = np.random.default_rng(0)
    g = fg.from_numpy(rng.random((256, 64), np.float32)).realize()
    h = fg.from_numpy(rng.random((256, 64), np.float32)).realize()
    merge = schedule_module._sibling_reductions
    if not siblings:
        schedule_module._sibling_reductions = lambda *args: set()
    engine.forget_plans(lambda key: True)  # compiled again: the schedule is not cached
    try:
        with fg.config.override(dump=str(folder)):
            fg.realize(*_program(g, h, scale))
    finally:
        schedule_module._sibling_reductions = merge
        engine.forget_plans(lambda key: True)
    return str(folder)


@pytest.fixture
def dumps(tmp_path):
    return _dump(tmp_path / "apart", siblings=False), _dump(tmp_path / "merged")


def test_a_rule_switched_off_shows_the_kernels_it_merges(dumps):
    apart, merged = dumps
    a, b = read_dump(apart), read_dump(merged)
    assert len(a) == 3 and len(b) == 2
    diff = diff_dumps(apart, merged)
    assert [r.kind for r in diff.rows] == ["merged", "same"]
    row = diff.rows[0]
    (big,) = row.b
    assert {k.name for k in row.a} == set(a) - set(b)  # both sums of A, into one kernel of B
    line = _program.__code__.co_firstlineno + 3
    assert {f"sum (test_schedule_diff.py:{line})", f"mul (test_schedule_diff.py:{line + 1})"} <= (
        set(big.user_ops)
    )
    assert big.bytes < sum(k.bytes for k in row.a)  # the merged kernel reads g once
    assert all(k.ms is not None and k.ms > 0 and k.runs == 1 for k in row.a + row.b)
    same = diff.rows[1]
    assert same.a[0].name == same.b[0].name and "EXP" in same.a[0].ops
    # the other way round: one kernel of A split into two of B
    back = diff_dumps(merged, apart)
    assert [r.kind for r in back.rows] == ["split", "same"]
    assert back.rows[0].a[0].name == big.name and len(back.rows[0].b) == 2


def test_a_changed_kernel_is_added_and_removed(tmp_path):
    first = _dump(tmp_path / "first")
    second = _dump(tmp_path / "second", scale=3.0)  # the exp's kernel computes other code
    diff = diff_dumps(first, second)
    kinds = sorted(r.kind for r in diff.rows)
    assert kinds == ["added", "removed", "same"]
    added = next(r for r in diff.rows if r.kind == "added")
    removed = next(r for r in diff.rows if r.kind == "removed")
    assert added.b[0].name != removed.a[0].name
    assert added.b[0].user_ops == removed.a[0].user_ops  # the same ops, as one each: not merged


def test_the_command_prints_both_sides_and_refuses_bad_arguments(dumps, capsys, tmp_path):
    apart, merged = dumps
    assert main([apart, merged]) == 0
    out = capsys.readouterr().out
    a, b = read_dump(apart), read_dump(merged)
    assert "1 merged, 0 split, 0 added, 0 removed, 1 same" in out
    for name in set(a) ^ set(b):
        assert name in out
    assert (set(a) & set(b)).isdisjoint(out.split())  # same kernels only with --all
    assert main(["--all", apart, merged]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in set(a) | set(b))
    assert main([apart]) == 2
    assert "usage: python -m fusegrad.schedule_diff" in capsys.readouterr().err
    assert main([apart, str(tmp_path / "nothing")]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_a_dump_without_schedules_or_times_still_diffs(dumps, tmp_path):
    """Folders dumped before schedules.json and the times were written."""
    apart, merged = dumps
    old = tmp_path / "old"
    old.mkdir()
    manifest = json.loads((tmp_path / "apart" / "manifest.json").read_text())
    for entry in manifest:
        del entry["this_run"]["ms"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    kernels = read_dump(str(old))
    assert all(k.runs == 1 and k.ms is None for k in kernels.values())
    assert [r.kind for r in diff_dumps(str(old), merged).rows] == ["merged", "same"]
    assert " - " in diff_dumps(str(old), merged).format()  # an unknown time
