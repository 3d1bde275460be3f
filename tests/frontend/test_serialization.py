"""fg.save / fg.load: round trips of tensors, state dicts and nested containers, and
truncated, altered or foreign files refused with a clear error."""

from __future__ import annotations

import io
import os
import pickle
import stat
import subprocess
import sys
from collections import OrderedDict
from subprocess import PIPE

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def roundtrip(obj):
    buf = io.BytesIO()
    fg.save(obj, buf)
    buf.seek(0)
    return fg.load(buf)


def test_tensors_keep_values_dtypes_shapes_and_requires_grad():
    ts = [
        fg.tensor([[1.5, -2.0]]),
        fg.tensor(3, dtype=fg.int64),
        fg.tensor([True, False]),
        fg.tensor(np.arange(6.0).reshape(2, 3), dtype=fg.float64),
        fg.tensor([1, 2], dtype=fg.int32),
        fg.zeros(0, 3),
        fg.tensor([1.0, 2.0], requires_grad=True),
    ]
    back = roundtrip(ts)
    for a, b in zip(ts, back):
        assert b.dtype is a.dtype and b.shape == a.shape and b.requires_grad == a.requires_grad
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_nested_containers_and_plain_values():
    obj = {
        "ints": [1, -2, 2**70],
        "tuple": (0.5, float("inf"), None, "text"),
        3: {"inner": OrderedDict([("b", 1), ("a", fg.ones(2))])},
        (1, 2): np.arange(3, dtype=np.int16),
        "scalar": np.float32(2.5),
        "flag": True,
    }
    back = roundtrip(obj)
    assert back["ints"] == [1, -2, 2**70]
    assert back["tuple"] == (0.5, float("inf"), None, "text")
    assert isinstance(back[3]["inner"], OrderedDict) and list(back[3]["inner"]) == ["b", "a"]
    assert back[3]["inner"]["a"].tolist() == [1.0, 1.0]
    assert back[(1, 2)].dtype == np.int16 and back[(1, 2)].tolist() == [0, 1, 2]
    assert back["scalar"] == np.float32(2.5) and back["flag"] is True


def test_model_and_optimizer_state_dicts(tmp_path):
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    opt = fg.optim.AdamW(model.parameters(), lr=0.01)
    model(fg.ones(5, 3)).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.fg"
    fg.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 7}, path)
    ckpt = fg.load(path)
    fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    fresh.load_state_dict(ckpt["model"])
    for (name, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    opt2 = fg.optim.AdamW(fresh.parameters(), lr=0.5)
    opt2.load_state_dict(ckpt["opt"])
    assert opt2.param_groups[0]["lr"] == 0.01 and ckpt["epoch"] == 7
    assert opt2.state_dict()["state"][0]["step"] == 1


def test_unsupported_objects_are_refused_at_save():
    with pytest.raises(TypeError, match="cannot save an object of type"):
        fg.save({"fn": print}, io.BytesIO())
    with pytest.raises(TypeError, match="dtype"):
        fg.save(np.array(["a"], dtype=object), io.BytesIO())


def saved_bytes():
    buf = io.BytesIO()
    fg.save({"w": fg.tensor([1.0, 2.0, 3.0]), "n": 4}, buf)
    return buf.getvalue()


@pytest.mark.parametrize("cut", [0, 5, 20, -40, -1])
def test_truncated_file_raises(cut):
    raw = saved_bytes()
    with pytest.raises(fg.SerializationError, match="not a valid fusegrad save file"):
        fg.load(io.BytesIO(raw[:cut]))


def test_altered_file_raises():
    raw = bytearray(saved_bytes())
    raw[-40] ^= 0xFF  # a byte of the tensor data
    with pytest.raises(fg.SerializationError, match="checksum"):
        fg.load(io.BytesIO(bytes(raw)))


def test_pickle_files_are_not_executed():
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('executed')",))

    with pytest.raises(fg.SerializationError, match="pickle"):
        fg.load(io.BytesIO(pickle.dumps(Boom())))


def test_a_well_formed_file_with_a_bad_description_is_refused():
    import hashlib
    import json
    import struct

    from fusegrad.serialization import MAGIC

    def forge(header, data=b""):
        head = json.dumps(header).encode()
        body = MAGIC + struct.pack("<Q", len(head)) + head + data
        return io.BytesIO(body + hashlib.sha256(body).digest())

    base = {"format": "fusegrad", "version": 1, "arrays": []}
    with pytest.raises(fg.SerializationError, match="unknown entry kind"):
        fg.load(forge({**base, "root": {"module": "os.system"}}))
    with pytest.raises(fg.SerializationError, match="plain numeric dtype"):
        arrays = [{"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}]
        fg.load(forge({**base, "root": {"ndarray": 0}, "arrays": arrays}, b"\0" * 8))
    with pytest.raises(fg.SerializationError, match="does not fit"):
        arrays = [{"dtype": "float64", "shape": [4], "offset": 0, "nbytes": 32}]
        fg.load(forge({**base, "root": {"ndarray": 0}, "arrays": arrays}, b"\0" * 8))
    with pytest.raises(fg.SerializationError, match="not in the file"):
        fg.load(forge({**base, "root": {"tensor": 3}}))


WRITER = """
import sys
import numpy as np
import fusegrad as fg
path, value, times = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
state = {"w": fg.tensor(np.full(300_000, value, np.float32)), "value": value}
for _ in range(times):
    fg.save(state, path)
"""


def test_concurrent_saves_to_one_path_never_show_a_partial_file(tmp_path):
    """Two processes save different 1.2 MB states to one path, again and again, while
    this one loads it: every load is whole and is one of the two; no temporary file
    stays behind. (With one fixed `path + '.tmp'` the writers wrote into each other's
    file and renamed it away under each other.)"""
    path = tmp_path / "state.fg"
    fg.save({"w": fg.tensor(np.full(300_000, 1.0, np.float32)), "value": 1.0}, path)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(v), "25"], stderr=PIPE)
        for v in (1.0, 2.0)
    ]
    seen = set()
    while any(w.poll() is None for w in writers):
        state = fg.load(path)  # raises SerializationError on a partial file
        w = state["w"].numpy()
        assert w.shape == (300_000,) and (w == state["value"]).all()
        seen.add(state["value"])
    for w in writers:
        assert w.wait(timeout=60) == 0, w.stderr.read().decode()
    assert seen <= {1.0, 2.0} and seen
    assert fg.load(path)["value"] in (1.0, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.fg"]


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.fg"
    fg.save({"step": 1}, path)

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        fg.save({"step": 2}, path)
    monkeypatch.undo()
    assert fg.load(path) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.fg"]


def test_a_saved_file_has_the_usual_permissions(tmp_path):
    path = tmp_path / "state.fg"
    fg.save({"step": 1}, path)
    old = os.umask(0o022)
    os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~old


class _MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
        self.head = nn.Linear(3, 1)

    def forward(self, x):
        return self.head(self.body(x))


_MODEL_CLASSES = [_MyModel, nn.Sequential, nn.Linear, nn.ReLU]


def _saved_model():
    fg.manual_seed(0)
    model = _MyModel()
    f = io.BytesIO()
    fg.save(model, f)
    f.seek(0)
    return model, f


def test_a_whole_module_loads_with_weights_only_once_its_classes_are_allowed():
    model, f = _saved_model()
    x = fg.tensor([[1.0, -2.0]])
    with pytest.raises(fg.SerializationError, match="_MyModel.*add_safe_globals"):
        fg.load(f)  # as torch: no class of a model is allowed by default
    with fg.serialization.safe_globals(_MODEL_CLASSES):
        f.seek(0)
        loaded = fg.load(f)
    assert type(loaded) is _MyModel and loaded(x).tolist() == model(x).tolist()
    assert fg.serialization.get_safe_globals() == []  # the context's allowance ends with it
    f.seek(0)
    with pytest.raises(fg.SerializationError, match="fusegrad.nn.layers.Linear"):
        with fg.serialization.safe_globals([_MyModel, nn.Sequential, nn.ReLU]):
            fg.load(f)  # one class not allowed: refused, naming it
    fg.serialization.add_safe_globals(_MODEL_CLASSES)
    try:
        f.seek(0)
        assert type(fg.load(f)) is _MyModel
    finally:
        fg.serialization.clear_safe_globals()


def test_weights_only_never_calls_a_function_the_file_names(tmp_path):
    # a crafted whole-module file whose pickle calls os.system: refused before any call,
    # even with its digest recomputed
    import hashlib

    from fusegrad.serialization import PICKLE_MAGIC

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    body = PICKLE_MAGIC + pickle.dumps(Evil())
    path = tmp_path / "evil.pt"
    path.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(fg.SerializationError, match="system"):
        fg.load(path)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(fg.SerializationError, match="does not load"):
        bad = PICKLE_MAGIC + b"\x80\x05garbage"
        path.write_bytes(bad + hashlib.sha256(bad).digest())
        fg.load(path)


def test_weights_only_whole_modules_at_special_points():
    # an empty container, and a module holding a 0-d, an empty and a -0.0 parameter
    f = io.BytesIO()
    fg.save(nn.Sequential(), f)
    f.seek(0)
    with fg.serialization.safe_globals([nn.Sequential]):
        assert len(fg.load(f)) == 0
    m = nn.Module()
    m.a = nn.Parameter(fg.tensor(-0.0))
    m.b = nn.Parameter(fg.zeros(0, 3))
    f = io.BytesIO()
    fg.save(m, f)
    f.seek(0)
    with fg.serialization.safe_globals([nn.Module]):
        loaded = fg.load(f)
    assert loaded.a.shape == () and np.signbit(loaded.a.item()) and loaded.a.requires_grad
    assert loaded.b.shape == (0, 3)
