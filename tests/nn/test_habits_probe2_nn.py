"""nn habits found wrong or missing by a second probe of fusegrad against PyTorch 2.13
(expected values are PyTorch's)."""

from __future__ import annotations

import io

import pytest

import fusegrad as fg
from fusegrad import nn


def test_identity_takes_and_ignores_arguments():
    assert nn.Identity(3, x=4)(fg.ones(2)).tolist() == [1.0, 1.0]


def test_save_and_load_a_whole_module_as_torch():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    x = fg.tensor([[1.0, -2.0]])
    f = io.BytesIO()
    fg.save(model, f)
    f.seek(0)
    with pytest.raises(RuntimeError, match="weights_only=False"):
        fg.load(f)  # torch 2.13's default refuses a pickled module too
    f.seek(0)
    loaded = fg.load(f, weights_only=False)
    assert type(loaded) is nn.Sequential
    assert loaded(x).tolist() == model(x).tolist()
    assert list(loaded.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_a_whole_module_file_that_was_altered_is_refused(tmp_path):
    path = tmp_path / "model.pt"
    fg.save(nn.Linear(2, 1), path)
    raw = bytearray(path.read_bytes())
    raw[20] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(fg.SerializationError, match="checksum"):
        fg.load(path, weights_only=False)
