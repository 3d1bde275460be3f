"""python -m fusegrad.replay: a dumped kernel runs alone, checked and timed.

The oracle is twofold: the values the kernel computed in the run that dumped it (the
tensors' numpy()) and the reference evaluator run on the dumped graph. An edited .ll must
change the result, and the check must say so."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.replay import ReplayError, main, replay

# on the CPU whatever the test device: a CPU kernel's .ll replayed (the .cu: test_replay_cuda.py)
pytestmark = pytest.mark.cpu_device


def dumped(folder, *tensors, inputs=True):
    """Realize `tensors` with FUSEGRAD_DUMP=folder; the dumped kernels' stems, in order."""
    with fg.config.override(dump=str(folder), dump_inputs=inputs):
        fg.realize(*tensors)
    return sorted(p[: -len(".json")] for p in glob.glob(os.path.join(folder, "0*.json")))


def test_a_dumped_kernel_replays_to_the_values_of_its_run(tmp_path):
    x = fg.randn(64, 32).realize()
    y = (x * 2).softmax(1)
    (stem,) = dumped(tmp_path, y)
    result = replay(stem, runs=3)
    assert result.matches is True and result.mismatches == []
    assert result.inputs_dumped
    np.testing.assert_array_equal(result.outputs[0], y.numpy())  # the same code, same inputs
    np.testing.assert_allclose(result.reference[0], y.numpy(), rtol=1e-5, atol=1e-7)
    assert result.seconds > 0


def test_the_dump_says_what_running_a_kernel_alone_takes(tmp_path):
    x = fg.randn(6, 4).realize()
    i = fg.tensor([3, 0, 5], dtype=fg.int64)
    stem, _ = dumped(tmp_path, x[i] * 2)  # the gather, then the product
    with open(stem + ".json") as f:
        meta = json.load(f)
    assert meta["language"] == "LLVM IR" and meta["name"] in stem
    assert [p["shape"] for p in meta["outputs"]] == [[3, 4]] and "gather" in meta["name"]
    assert {(tuple(p["shape"]), p["dtype"]) for p in meta["inputs"]} == {
        ((6, 4), "float32"),
        ((3,), "int64"),
    }
    assert all(p["strides"] == [4, 1] for p in meta["inputs"] if p["shape"] == [6, 4])
    assert meta["input_values"] and meta["graph"]
    result = replay(stem)
    assert result.matches
    np.testing.assert_array_equal(result.outputs[0], x.numpy()[[3, 0, 5]])


def test_every_output_of_a_kernel_with_several_is_checked(tmp_path):
    g, a = fg.randn(64, 32).realize(), fg.randn(64, 32).realize()
    s1, s2 = (g * a).sum(0, keepdim=True), g.sum(0, keepdim=True)  # one kernel (rule 7)
    (stem,) = dumped(tmp_path, s1, s2)
    result = replay(stem)
    assert len(result.outputs) == 2 and result.matches
    np.testing.assert_array_equal(result.outputs[0], s1.numpy())
    np.testing.assert_array_equal(result.outputs[1], s2.numpy())


def test_an_edited_ll_runs_the_edited_code_and_the_check_reports_it(tmp_path, capsys):
    x = fg.randn(64).realize()
    y = x.exp() * 3
    (stem,) = dumped(tmp_path, y)
    with open(stem + ".ll") as f:
        source = f.read()
    assert "3.000000e+00" in source
    with open(stem + ".ll", "w") as f:
        f.write(source.replace("3.000000e+00", "4.000000e+00"))
    result = replay(stem)
    np.testing.assert_allclose(result.outputs[0], y.numpy() * 4 / 3, rtol=1e-6)
    assert result.matches is False
    (line,) = result.mismatches
    assert line.startswith("output 0: 64 of 64 elements differ; at (")
    assert main([stem + ".ll", "--runs", "2"]) == 1
    out = capsys.readouterr().out
    assert "check: MISMATCH against the reference evaluator" in out and "output 0:" in out


def test_another_ll_file_can_be_named(tmp_path):
    x = fg.randn(16).realize()
    (stem,) = dumped(tmp_path, x.sin() + 1.5)
    other = tmp_path / "mine.ll"
    with open(stem + ".ll") as f:
        other.write_text(f.read().replace("1.500000e+00", "2.500000e+00"))
    result = replay(stem, ll=str(other))
    assert result.source == str(other) and result.matches is False
    np.testing.assert_allclose(result.outputs[0], np.sin(x.numpy()) + 2.5, rtol=1e-5)


def test_without_dumped_values_it_runs_on_random_inputs_and_checks_nothing(tmp_path):
    x = fg.randn(8, 8).realize()
    stems = dumped(tmp_path, x.relu().sum(1), inputs=False)
    assert not glob.glob(os.path.join(tmp_path, "*.npy"))
    assert not glob.glob(os.path.join(tmp_path, "*.graph.pkl"))
    result = replay(stems[0], runs=1)
    assert result.matches is None and not result.inputs_dumped
    assert "check: none" in result.report()


def test_bad_paths_and_command_lines_are_refused(tmp_path, capsys):
    with pytest.raises(ReplayError, match=r"nope\.json not found"):
        replay(str(tmp_path / "nope"))
    assert main([]) == 2
    assert main([str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["a", "--runs"]) == 2


def test_the_module_runs_as_a_command(tmp_path):
    x = fg.randn(32).realize()
    (stem,) = dumped(tmp_path, (x * x).sqrt())
    done = subprocess.run(
        [sys.executable, "-m", "fusegrad.replay", stem, "--runs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "check: matches the reference evaluator (1 output(s))" in done.stdout
