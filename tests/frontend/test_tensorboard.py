"""`fusegrad.tensorboard.SummaryWriter` (torch.utils.tensorboard's, for makemore and the
like): event files read back by a TFRecord and protobuf reader written here, apart from
the writer's own code; with torch and TensorBoard installed, compared byte for byte with
torch's writer."""

from __future__ import annotations

import glob
import math
import os
import re
import struct

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.tensorboard import SummaryWriter

# ---------------------------------------------------------------- a reader of our own


def _crc32c_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = _crc32c_bitwise(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path: str) -> list[bytes]:
    """The TFRecord payloads of a file, each checksum checked."""
    data, at, out = open(path, "rb").read(), 0, []
    while at < len(data):
        head = data[at : at + 8]
        (n,) = struct.unpack("<Q", head)
        assert struct.unpack("<I", data[at + 8 : at + 12])[0] == _masked(head)
        body = data[at + 12 : at + 12 + n]
        assert struct.unpack("<I", data[at + 12 + n : at + 16 + n])[0] == _masked(body)
        out.append(body)
        at += 16 + n
    assert at == len(data)
    return out


def _fields(data: bytes) -> dict[int, list]:
    """A protobuf message: field number -> its values (varints as ints, 64- and 32-bit
    fields as bytes, length-delimited ones as bytes), in order."""
    out: dict[int, list] = {}
    at = 0

    def varint():
        nonlocal at
        shift = n = 0
        while True:
            b = data[at]
            at += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while at < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        elif wire == 2:
            n = varint()
            value, at = data[at : at + n], at + n
        else:
            raise AssertionError(f"wire type {wire}")
        out.setdefault(field, []).append(value)
    return out


def _double(b: bytes) -> float:
    return struct.unpack("<d", b)[0]


def _events(folder: str) -> list[dict]:
    (path,) = glob.glob(os.path.join(folder, "events.out.tfevents.*"))
    return [_fields(r) for r in _records(path)]


def _summary_value(event: dict) -> dict:
    (summary,) = event[5]
    (value,) = _fields(summary)[1]
    return _fields(value)


def _scalar(event: dict) -> tuple[str, int, float]:
    v = _summary_value(event)
    step = event.get(2, [0])[0]
    return v[1][0].decode(), step, struct.unpack("<f", v[2][0])[0]


# ---------------------------------------------------------------- tests


def test_a_files_first_event_says_its_version_and_writer(tmp_path):
    with SummaryWriter(tmp_path):
        pass
    (path,) = glob.glob(str(tmp_path / "*"))
    name = os.path.basename(path)
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\..+\.{os.getpid()}\.\d+", name), name
    (first,) = _events(str(tmp_path))
    assert first[3] == [b"brain.Event:2"]
    assert _fields(first[10][0])[1] == [b"fusegrad.tensorboard"]
    assert abs(_double(first[1][0]) - __import__("time").time()) < 60


def test_scalars_at_special_points_keep_their_values_steps_and_times(tmp_path):
    values = [0.0, -0.0, 1, -1, 1.5, float("nan"), float("inf"), -float("inf"), 3.4e38]
    with SummaryWriter(tmp_path) as w:
        for step, x in enumerate(values):
            w.add_scalar("x", x, step, walltime=1000.0 + step)
        w.add_scalar("tensor", fg.tensor(2.5), 10, walltime=5.0)  # a 0-d tensor
        w.add_scalar("one", fg.tensor([[-0.25]]), None, walltime=0.0)  # one element
        w.add_scalar("bf16", fg.tensor(0.5, dtype=fg.bfloat16), 11)
        w.add_scalar("numpy", np.float64(7.0), 12)
    events = _events(str(tmp_path))[1:]
    got = [_scalar(e) for e in events]
    for (tag, step, x), (k, want) in zip(got, enumerate(values)):
        assert (tag, step) == ("x", k)
        want = struct.unpack("<f", struct.pack("<f", want))[0]  # (a float32 value)
        assert (math.isnan(x) and math.isnan(want)) or x == want
        assert math.copysign(1.0, x) == math.copysign(1.0, want)  # -0.0 stays -0.0
        assert _double(events[k][1][0]) == 1000.0 + k
    assert got[len(values) :] == [
        ("tensor", 10, 2.5),
        ("one", 0, -0.25),
        ("bf16", 11, 0.5),
        ("numpy", 12, 7.0),
    ]
    assert 1 not in events[len(values) + 1]  # a wall time of 0 is left out, as proto3 does


def test_a_scalar_of_several_elements_is_refused_as_torch_refuses_it(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(AssertionError, match="one element"):
            w.add_scalar("x", fg.tensor([1.0, 2.0]))
        with pytest.raises(TypeError, match="numbers"):
            w.add_scalar("x", "high")


def test_new_style_scalars_are_tensors_of_the_scalars_plugin(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("f", 0.1, 1, new_style=True)
        w.add_scalar("d", 0.1, 2, new_style=True, double_precision=True)
    f, d = (_summary_value(e) for e in _events(str(tmp_path))[1:])
    for v, dtype, field, fmt in ((f, 1, 5, "<f"), (d, 2, 6, "<d")):
        plugin = _fields(_fields(v[9][0])[1][0])[1]
        assert plugin == [b"scalars"]
        tensor = _fields(v[8][0])
        assert tensor[1] == [dtype]
        assert (
            struct.unpack(fmt, tensor[field][0])[0] == struct.unpack(fmt, struct.pack(fmt, 0.1))[0]
        )


def test_scalar_groups_go_to_a_folder_per_tag_under_the_main_tag(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalars("loss/all", {"train": 1.0, "test": fg.tensor(2.0)}, 3)
        w.add_scalars("loss/all", {"train": 0.5}, 4)
    assert sorted(os.listdir(tmp_path))[-2:] == ["loss_all_test", "loss_all_train"]
    train = [_scalar(e) for e in _events(str(tmp_path / "loss_all_train"))[1:]]
    test = [_scalar(e) for e in _events(str(tmp_path / "loss_all_test"))[1:]]
    assert train == [("loss/all", 3, 1.0), ("loss/all", 4, 0.5)]
    assert test == [("loss/all", 3, 2.0)]
    assert len(_events(str(tmp_path))) == 1  # the writer's own file: its version alone


def _histogram(event: dict) -> dict:
    h = _fields(_summary_value(event)[5][0])
    stats = {
        k: _double(h[f][0]) if f in h else 0.0
        for k, f in zip(("min", "max", "num", "sum", "sumsq"), range(1, 6))
    }
    (limits,), (counts,) = h[6], h[7]
    stats["limits"] = np.frombuffer(limits, "<f8")
    stats["counts"] = np.frombuffer(counts, "<f8")
    return stats


def test_a_histogram_counts_every_value_and_keeps_one_empty_bucket_before_them(tmp_path):
    values = np.array([-2.0, -0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 3.5], np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("tf", fg.tensor(values), 1)  # TensorBoard's buckets
        w.add_histogram("ten", values, 2, bins=10)  # numpy's
        w.add_histogram("capped", values, 3, bins=40, max_bins=7)
        w.add_histogram("one", np.full(5, 2.0), 4)
    tf, ten, capped, one = (_histogram(e) for e in _events(str(tmp_path))[1:])
    for h in (tf, ten, capped):
        assert (h["min"], h["max"], h["num"]) == (-2.0, 3.5, 8.0)
        assert h["sum"] == values.sum() and h["sumsq"] == values.dot(values)  # (float32's)
        assert h["counts"].sum() == 8 and h["counts"][0] == 0  # the empty bucket first
        assert h["counts"][-1] > 0 and len(h["limits"]) == len(h["counts"])
        assert np.all(np.diff(h["limits"]) > 0)
    counts, edges = np.histogram(values, bins=10)
    np.testing.assert_array_equal(ten["limits"], edges[1:] if counts[0] == 0 else edges)
    # TensorBoard's buckets: each value in the bucket whose right edge is the first >= it
    for x in values:
        k = np.searchsorted(tf["limits"], x)
        assert tf["limits"][k - 1] <= x <= tf["limits"][k] or (k == 0 and x <= tf["limits"][0])
    # torch's rule: every 40 // 7 = 5 buckets as one (8 buckets), one empty before them
    assert len(capped["counts"]) == 9 and capped["counts"][0] == 0
    assert one["counts"].sum() == 5 and one["min"] == one["max"] == 2.0


def test_histograms_refuse_what_numpy_cannot_count(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(ValueError, match="no element"):
            w.add_histogram("e", np.zeros(0))
        with pytest.raises(ValueError, match="NaN"):
            w.add_histogram("n", np.array([1.0, np.nan]))


def test_text_is_a_string_tensor_of_the_text_plugin(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "lr **0.1**, é", 7)
    (event,) = _events(str(tmp_path))[1:]
    v = _summary_value(event)
    assert v[1] == [b"notes/text_summary"]
    assert _fields(_fields(v[9][0])[1][0])[1] == [b"text"]
    tensor = _fields(v[8][0])
    assert tensor[1] == [7] and tensor[8] == ["lr **0.1**, é".encode()]
    assert _fields(_fields(tensor[2][0])[2][0])[1] == [1]  # shape (1,)
    assert event[2] == [7]


def test_events_wait_for_the_queue_then_reach_the_disk(tmp_path):
    w = SummaryWriter(tmp_path, max_queue=3)
    w.add_scalar("x", 1.0, 1)
    w.add_scalar("x", 2.0, 2)
    assert len(_events(str(tmp_path))) == 1  # two waiting
    w.add_scalar("x", 3.0, 3)
    assert len(_events(str(tmp_path))) == 4  # the third filled the queue
    w.add_scalar("x", 4.0, 4)
    w.flush()
    assert [_scalar(e)[2] for e in _events(str(tmp_path))[1:]] == [1.0, 2.0, 3.0, 4.0]
    w.close()
    w.add_scalar("x", 5.0, 5)  # after close: a new file, as torch's writer does
    w.close()
    assert len(glob.glob(str(tmp_path / "events.out.tfevents.*"))) == 2


def test_a_purge_step_starts_the_file_with_torchs_two_events(tmp_path):
    with SummaryWriter(tmp_path, purge_step=40) as w:
        w.add_scalar("x", 1.0, 41)
    first, version, start, scalar = _events(str(tmp_path))
    assert version[2] == [40] and version[3] == [b"brain.Event:2"]
    assert start[2] == [40] and _fields(start[7][0])[1] == [1]  # SessionLog START
    assert _scalar(scalar) == ("x", 41, 1.0)


def test_the_default_folder_is_torchs_runs_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_lr0.1")
    w.close()
    (folder,) = os.listdir(tmp_path / "runs")
    assert re.fullmatch(r"[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_.+_lr0\.1", folder), folder
    assert w.get_logdir() == os.path.join("runs", folder)


def test_what_the_writer_lacks_is_named():
    w = SummaryWriter.__new__(SummaryWriter)
    with pytest.raises(AttributeError, match="SummaryWriter.add_image is not in fusegrad"):
        w.add_image("x", np.zeros((3, 4, 4)))
    assert not hasattr(w, "add_graph")


def test_the_torch_shim_answers_torch_utils_tensorboard():
    from fusegrad import torch_shim

    shim = torch_shim.install()
    try:
        from torch.utils.tensorboard import SummaryWriter as Torchs

        assert Torchs is SummaryWriter
    finally:
        torch_shim.uninstall(shim)


def test_the_events_are_torchs_byte_for_byte(tmp_path):
    """With torch and TensorBoard installed: every event after a file's first is the bytes
    torch's writer writes for the same calls and wall times."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    values = np.random.default_rng(0).standard_normal(500)

    def write(cls, folder):
        with cls(str(folder), purge_step=3) as w:
            w.add_scalar("a", -0.0, 3, walltime=1.0)
            w.add_scalar("b", 0.1, 4, walltime=2.0, new_style=True)
            w.add_scalar("c", 0.1, 4, walltime=2.0, new_style=True, double_precision=True)
            w.add_scalars("g/h", {"x": 1.0, "y": 2.0}, 5, walltime=3.0)
            w.add_histogram("h", values, 6, walltime=4.0)
            w.add_histogram("i", np.arange(20), 6, bins=7, walltime=4.0, max_bins=3)
            w.add_text("t", "hi", 7, walltime=5.0)

    write(TorchWriter, tmp_path / "torch")
    write(SummaryWriter, tmp_path / "fusegrad")
    for sub in ("", "g_h_x", "g_h_y"):
        (theirs,) = glob.glob(str(tmp_path / "torch" / sub / "events*"))
        (ours,) = glob.glob(str(tmp_path / "fusegrad" / sub / "events*"))
        a, b = _records(theirs)[1:], _records(ours)[1:]
        if sub == "":  # purge_step's two events: wall times of their own
            a, b = a[2:], b[2:]
        assert a == b, sub
