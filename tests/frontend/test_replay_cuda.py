"""python -m fusegrad.replay --cu: a dumped kernel's CUDA C runs alone, checked and timed.

The kernels run on the cuda backend's emulator (on the GPU where the suite runs on one:
tests/_emulated.py), with the launches the dump recorded. The oracles are the values of
the run that dumped the kernel and the reference evaluator on its dumped graph; an edited
.cu must change the result, and the check must say so."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from _emulated import ON_GPU, emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.replay import ReplayError, main, replay


def dumped(folder, *tensors):
    """Realize `tensors` with FUSEGRAD_DUMP=folder and their inputs; the kernels' stems."""
    with fg.config.override(dump=str(folder), dump_inputs=True):
        fg.realize(*tensors)
    return sorted(p[: -len(".json")] for p in glob.glob(os.path.join(folder, "0*.json")))


def edited(stem: str, path, old: str, new: str) -> str:
    """A copy of the kernel's .cu at `path` with each `old` made `new`."""
    with open(stem + ".cu") as f:
        source = f.read()
    assert old in source
    path.write_text(source.replace(old, new))
    return str(path)


@pytest.mark.usefixtures("emulated")
def test_a_cpu_runs_elementwise_kernel_replays_its_cu_and_matches(tmp_path):
    x = fg.randn(64).realize()
    y = x.exp() * 3
    (stem,) = dumped(tmp_path, y)
    with open(stem + ".json") as f:
        meta = json.load(f)
    assert meta["language"] == "LLVM IR"  # a CPU run: the .cu was rendered, never ran
    (launch,) = meta["cuda_launches"]["launches"]
    assert launch["symbol"] == meta["name"] and launch["block"][0] > 1
    result = replay(stem, cu=True, runs=2)
    assert result.source == stem + ".cu" and result.emulated is not ON_GPU
    assert result.matches is True and result.inputs_dumped
    np.testing.assert_allclose(result.outputs[0], y.numpy(), rtol=1e-5)
    assert result.seconds > 0
    report = result.report()
    assert "check: matches the reference evaluator (1 output(s))" in report
    assert ("on the emulator, not a GPU's time" in report) is not ON_GPU
    assert ("ran on: the CUDA emulator on the CPU" in report) is not ON_GPU


@pytest.mark.usefixtures("emulated")
def test_a_reduction_kernels_cu_replays_from_the_command_line(tmp_path, capsys):
    x = fg.randn(48, 40).realize()
    y = (x * 2).softmax(1)
    (stem,) = dumped(tmp_path, y)
    result = replay(stem + ".cu", runs=1)  # naming the .cu replays it
    assert result.source == stem + ".cu" and result.matches is True
    np.testing.assert_allclose(result.outputs[0], y.numpy(), rtol=1e-5, atol=1e-7)
    assert main([stem, "--cu", "--runs", "1"]) == 0
    assert "check: matches the reference evaluator" in capsys.readouterr().out


@pytest.mark.usefixtures("emulated")
def test_an_edited_cu_runs_the_edited_code_and_the_check_reports_it(tmp_path, capsys):
    x = fg.randn(64).realize()
    y = x.exp() * 3
    (stem,) = dumped(tmp_path, y)
    mine = edited(stem, tmp_path / "mine.cu", "3.0f", "4.0f")
    result = replay(stem, cu=mine, runs=1)
    assert result.source == mine
    np.testing.assert_allclose(result.outputs[0], y.numpy() * 4 / 3, rtol=1e-5)
    assert result.matches is False
    (line,) = result.mismatches
    assert line.startswith("output 0: 64 of 64 elements differ; at (")
    assert main([stem, "--cu", mine, "--runs", "1"]) == 1
    out = capsys.readouterr().out
    assert "check: MISMATCH against the reference evaluator" in out and mine in out


@pytest.mark.usefixtures("emulated")
def test_an_edited_reduction_gives_the_changed_sums(tmp_path):
    x = fg.randn(8, 256).realize()
    s = x.sum(1)
    (stem,) = dumped(tmp_path, s)
    with open(stem + ".cu") as f:
        assert "0.0f" in f.read()  # the sum's start
    mine = edited(stem, tmp_path / "start.cu", "0.0f", "1.0f")
    result = replay(stem, cu=mine, runs=1)
    assert result.matches is False
    # every partial sum a thread starts begins at 1 now: each row's sum grows by a whole
    # number of ones, the same for every row
    grown = result.outputs[0] - x.numpy().sum(1)
    assert np.all(grown > 0.5)
    np.testing.assert_allclose(grown, np.round(grown), atol=1e-3)


@pytest.mark.usefixtures("emulated")
def test_a_kernel_that_ran_on_the_cuda_device_replays_its_two_launches(tmp_path):
    x = fg.randn(1 << 15, device="cuda").realize()
    s = x.sum()  # a long sum of one output: split over blocks, then a final launch
    (stem,) = dumped(tmp_path, s)
    with open(stem + ".json") as f:
        record = json.load(f)["cuda_launches"]
    assert [ln["symbol"] for ln in record["launches"]][1].endswith("_final")
    assert record["scratch"] and record["scratch"][0]["dtype"] == "float32"
    result = replay(stem, runs=1)  # its CUDA C, unasked: it has no LLVM IR
    assert result.source == stem + ".cu" and result.matches is True
    np.testing.assert_allclose(result.outputs[0], s.cpu().numpy(), rtol=1e-5)
    with pytest.raises(ReplayError, match="ran as CUDA C; it has no LLVM IR to replay"):
        replay(stem, ll=stem + ".ll")


@pytest.mark.usefixtures("emulated")
def test_a_cuda_softmax_is_dumped_with_a_note_for_the_llvm_ir_it_has_not(tmp_path):
    # its GPU loop nest keeps an online softmax's statistics (`AccOnlineExp`), which only
    # the CUDA C renderer renders: the dump's .raw.ll once failed rendering it as LLVM IR
    x = fg.randn(64, 32, device="cuda").realize()
    y = (x * 2).softmax(1)
    (stem,) = dumped(tmp_path, y)
    with open(stem + ".raw.ll") as f:
        assert "no LLVM IR: its GPU loop nest holds statements" in f.read()
    with open(stem + ".cu") as f:
        assert "__global__" in f.read()
    result = replay(stem, runs=1)
    assert result.matches is True
    np.testing.assert_allclose(result.outputs[0], y.cpu().numpy(), rtol=1e-5)


@pytest.mark.usefixtures("emulated")
def test_what_cannot_be_replayed_is_refused(tmp_path):
    x = fg.randn(16).realize()
    (stem,) = dumped(tmp_path, x.sin() + 1.5)
    with open(stem + ".json") as f:
        symbol = json.load(f)["name"]
    renamed = edited(stem, tmp_path / "renamed.cu", f" {symbol}(", " other(")
    with pytest.raises(ReplayError, match=f"defines no __global__ function {symbol}"):
        replay(stem, cu=renamed)
    broken = edited(stem, tmp_path / "broken.cu", "1.5f", "1.5f +")
    with pytest.raises(ReplayError, match="did not compile"):
        replay(stem, cu=broken)
    with pytest.raises(ReplayError, match="not both"):
        replay(stem, cu=True, ll=stem + ".ll")
    with open(stem + ".json") as f:
        meta = json.load(f)
    meta["cuda_launches"], meta["cuda_note"] = None, "an AMX tile kernel"  # as a tile kernel's
    with open(stem + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(ReplayError, match="has no CUDA C to replay: an AMX tile kernel"):
        replay(stem, cu=True)
    del meta["cuda_launches"]  # a dump by a fusegrad before launches were recorded
    with open(stem + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(ReplayError, match="records no CUDA launches"):
        replay(stem, cu=True)
    assert main([stem, "--cu"]) == 2


def test_on_a_gpu_the_cu_launches_as_the_dump_recorded(tmp_path):
    # the PyCUDA path through runtime/cuda_stub.py's GPU, which runs nothing: what is
    # checked is that it, not the emulator, gets the recorded launches
    from fusegrad.runtime.cuda import use_driver
    from fusegrad.runtime.cuda_stub import StubDriver

    x = fg.randn(64, 32).realize()
    (stem,) = dumped(tmp_path, (x * 2).softmax(1))
    with open(stem + ".json") as f:
        (launch,) = json.load(f)["cuda_launches"]["launches"]
    driver = StubDriver(log=True)
    with use_driver(driver):
        result = replay(stem, cu=True, runs=3)
    assert not result.emulated and "stub GPU" in result.device
    assert "not a GPU's time" not in result.report()
    want = (launch["symbol"], tuple(launch["grid"]), tuple(launch["block"]))
    assert [(name, tuple(g), tuple(b)) for name, g, b, _, _ in driver.ran] == [want] * 3
    assert {len(args) for _, _, _, args, _ in driver.ran} == {2 * 8}  # the output, the input
    assert {shared for *_, shared in driver.ran} == {launch["shared_bytes"]}
