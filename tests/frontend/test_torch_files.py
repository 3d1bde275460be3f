"""`fg.load` of files torch.save wrote (frontend/torch_files.py), without torch.

The files in tests/frontend/torch_files/ were written by torch 2.14.1 through
scripts/make_torch_files.py, which printed the values checked here; the damaged and crafted
files are made from them here.
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.checkpoint_files import SerializationError
from fusegrad.torch_files import _example_pickle

HERE = os.path.join(os.path.dirname(__file__), "torch_files")
# scripts/make_torch_files.py: the model in eval mode on arange(36) / 36
TORCH_EVAL_OUTPUT = [0.04980672895908356, 0.007739747874438763, 0.11600813269615173]


def model():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(32, 3))


def test_a_torch_state_dict_loads_into_the_same_model_and_computes_torchs_output():
    state = fg.load(os.path.join(HERE, "state_dict.pt"))
    assert list(state) == [
        "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
        "1.num_batches_tracked", "3.weight", "3.bias",
    ]  # fmt: skip
    assert state["1.num_batches_tracked"].shape == () and state["1.num_batches_tracked"].item() == 2
    m = model()
    m.load_state_dict(state)
    m.eval()
    out = m(fg.arange(36, dtype=fg.float32).reshape(1, 1, 6, 6) / 36)
    np.testing.assert_allclose(out.detach().numpy()[0], TORCH_EVAL_OUTPUT, rtol=1e-6, atol=1e-7)


def test_a_torch_checkpoint_keeps_its_dtypes_views_parameters_and_containers():
    ck = fg.load(os.path.join(HERE, "checkpoint.pt"))
    assert ck["epoch"] == 3 and ck["dtype"] == fg.bfloat16 and ck["size"] == (2, 3)
    assert ck["device"] == "cpu" and ck["mixed"] == [1, 2.5, "a", None, (True, b"x")]
    expect = {
        "bf16": (fg.bfloat16, [1.5, -2.25, 3.0]),
        "f16": (fg.float16, [0.5, 65504.0]),
        "i64": (fg.int64, [[1, -2], [3, 4]]),
        "i8": (fg.int8, [-128, 127]),
        "u8": (fg.uint8, [0, 255]),
        "bool": (fg.bool, [True, False, True]),
        "scalar": (fg.float32, 7.25),
        "transposed": (fg.float32, np.arange(12.0).reshape(3, 4).T.tolist()),
        "row": (fg.float32, [4.0, 5.0, 6.0, 7.0]),
        "column": (fg.float32, [2.0, 6.0, 10.0]),
    }
    for key, (dtype, values) in expect.items():
        assert ck[key].dtype == dtype and ck[key].tolist() == values, key
    f64 = ck["f64"].numpy()
    assert f64[0] == 1e-300 and f64[1] == 0.0 and np.signbit(f64[1])
    assert ck["empty"].shape == (0, 3)
    assert isinstance(ck["param"], nn.Parameter) and ck["param"].requires_grad
    assert isinstance(ck["frozen"], nn.Parameter) and not ck["frozen"].requires_grad
    assert ck["grad_leaf"].requires_grad and not isinstance(ck["grad_leaf"], nn.Parameter)
    # torch's optimizer state (its step a 0-d tensor) goes into fusegrad's Adam
    m = model()
    m.load_state_dict(ck["model"])
    opt = fg.optim.Adam(m.parameters(), lr=0.01)
    opt.load_state_dict(ck["optimizer"])
    assert float(opt.state_dict()["state"][0]["step"]) == 2.0
    opt.zero_grad()
    m(fg.ones(2, 1, 6, 6)).sum().backward()
    opt.step()
    assert float(opt.state_dict()["state"][0]["step"]) == 3.0


def test_a_pickled_torch_module_is_refused_naming_its_class():
    with pytest.raises(SerializationError, match=r"torch\.nn\.modules\.linear\.Linear"):
        fg.load(os.path.join(HERE, "whole_module.pt"))


def _zip(entries: dict, compress: int = zipfile.ZIP_STORED) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return io.BytesIO(buf.getvalue())


def test_damaged_and_crafted_torch_files_raise_instead_of_loading():
    two = np.array([1.0, 2.0], np.float32).tobytes()
    good = _zip({"f/data.pkl": _example_pickle(), "f/data/0": two})
    assert fg.load(good)["w"].tolist() == [1.0, 2.0]
    cases = {
        "holds 4 bytes, not the 2 x 4": {"f/data.pkl": _example_pickle(), "f/data/0": two[:4]},
        "no entry f/data/0": {"f/data.pkl": _example_pickle()},
        "no single data.pkl": {"f/other": b""},
        # size 3 from a storage of 2 elements (the pickle's K\x02\x85 is the size (2,))
        "does not fit its storage": {
            "f/data.pkl": _example_pickle().replace(b"K\x00K\x02\x85", b"K\x00K\x03\x85"),
            "f/data/0": two,
        },
        "names os.system": {
            "f/data.pkl": _example_pickle().replace(
                b"ctorch._utils\n_rebuild_tensor_v2\n", b"cos\nsystem\n"
            ),
            "f/data/0": two,
        },
        "byteorder entry says": {
            "f/data.pkl": _example_pickle(),
            "f/data/0": two,
            "f/byteorder": b"middle",
        },
    }
    for said, entries in cases.items():
        with pytest.raises(SerializationError, match=said):
            fg.load(_zip(entries))
    bomb = _zip({"f/data.pkl": _example_pickle(), "f/data/0": bytes(1 << 20)}, zipfile.ZIP_DEFLATED)
    with pytest.raises(SerializationError, match="compressed over 64 times"):
        fg.load(bomb)
    with pytest.raises(SerializationError, match="not a zip file torch.save wrote"):
        fg.load(io.BytesIO(good.getvalue()[:40]))


def test_a_big_endian_torch_file_is_swapped():
    big = np.array([1.0, 2.0], ">f4").tobytes()
    f = _zip({"f/data.pkl": _example_pickle(), "f/data/0": big, "f/byteorder": b"big"})
    assert fg.load(f)["w"].tolist() == [1.0, 2.0]


def _round_trip_object():
    lin = nn.Linear(3, 2)
    return lin, {
        "model": lin.state_dict(),
        "param": nn.Parameter(fg.tensor([0.5, -1.0])),
        "frozen": nn.Parameter(fg.ones(1), requires_grad=False),
        "leaf": fg.tensor([2.0], requires_grad=True),
        "plain": [1, 2**40, -(2**70), 2.5, None, True, "é", b"\x00\xff", (fg.bfloat16, fg.int8)],
        "bf16": fg.tensor([1.5, -2.25], dtype=fg.bfloat16),
        "bool": fg.tensor([True, False]),
        "i8": fg.tensor([-128, 127], dtype=fg.int8),
        "scalar": fg.tensor(3.0),
        "empty": fg.zeros(0, 2),
        "view": fg.arange(6.0).reshape(2, 3).t(),
    }


def test_torch_zip_writes_what_fg_load_reads_back():
    from fusegrad.torch_files import torch_zip

    lin, obj = _round_trip_object()
    back = fg.load(io.BytesIO(torch_zip(obj)))
    assert back["plain"] == [1, 2**40, -(2**70), 2.5, None, True, "é", b"\x00\xff",
                             (fg.bfloat16, fg.int8)]  # fmt: skip
    for key in ("bf16", "bool", "i8", "scalar", "empty", "view"):
        assert back[key].dtype == obj[key].dtype and back[key].shape == obj[key].shape, key
        assert back[key].tolist() == obj[key].tolist(), key
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert isinstance(back["frozen"], nn.Parameter) and not back["frozen"].requires_grad
    assert back["leaf"].requires_grad and not isinstance(back["leaf"], nn.Parameter)
    other = nn.Linear(3, 2)
    other.load_state_dict(back["model"])
    assert other.weight.tolist() == lin.weight.tolist()


def test_torch_zip_names_only_the_globals_torch_load_allows_by_default():
    import pickletools

    from fusegrad.torch_files import torch_zip

    data = torch_zip(_round_trip_object()[1], "ck")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        assert {"ck/data.pkl", "ck/byteorder", "ck/version", "ck/data/0"} <= set(names)
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        pickle_bytes = z.read("ck/data.pkl")
    named = {arg for op, arg, _ in pickletools.genops(pickle_bytes) if op.name == "GLOBAL"}
    allowed = {
        "torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_parameter",
        "collections OrderedDict", "_codecs encode", "torch FloatStorage", "torch BoolStorage",
        "torch CharStorage", "torch BFloat16Storage", "torch bfloat16", "torch int8",
    }  # fmt: skip
    assert named <= allowed, named - allowed


def test_torch_save_under_the_shim_writes_torchs_format_and_falls_back_for_modules(tmp_path):
    from fusegrad import serialization
    from fusegrad.torch_shim import TorchShim

    assert TorchShim().module("torch").save is serialization.save_for_torch
    path = tmp_path / "ck.pt"
    serialization.save_for_torch({"w": fg.tensor([1.0, 2.0]), "step": 3}, str(path))
    assert path.read_bytes()[:4] == b"PK\x03\x04"
    assert fg.load(str(path))["w"].tolist() == [1.0, 2.0]
    whole = tmp_path / "model.pt"
    serialization.save_for_torch(nn.Linear(2, 1), str(whole))  # a module: fusegrad's format
    assert isinstance(fg.load(str(whole), weights_only=False), nn.Linear)


def test_torch_reads_what_torch_zip_writes():
    """Cross-check with torch where it is installed (skipped, and said, where not)."""
    torch = pytest.importorskip("torch")
    from fusegrad.torch_files import torch_zip

    _, obj = _round_trip_object()
    got = torch.load(io.BytesIO(torch_zip(obj)))  # its default weights_only=True
    assert got["bf16"].dtype == torch.bfloat16 and got["bf16"].tolist() == [1.5, -2.25]
    assert got["view"].tolist() == obj["view"].tolist() and got["scalar"].shape == ()
    assert isinstance(got["param"], torch.nn.Parameter) and got["leaf"].requires_grad
