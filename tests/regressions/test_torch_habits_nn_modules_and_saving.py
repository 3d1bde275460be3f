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


def test_reassigning_a_parameter_or_module_keeps_its_place():
    # torch 2.13: ['weight', 'bias'] (fusegrad moved the re-assigned name last)
    lin = nn.Linear(2, 1)
    lin.weight = nn.Parameter(fg.ones(1, 2))
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    lin.bias = None
    lin.bias = nn.Parameter(fg.ones(1))
    assert list(lin.state_dict()) == ["weight", "bias"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(1, 1)
            self.b = nn.Linear(1, 1)

    net = Net()
    net.a = nn.Linear(1, 3)
    assert list(net.state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]


def test_sequential_and_modulelist_item_assignment():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 1), nn.ReLU(), nn.Linear(1, 1))
    model[-1] = nn.Linear(1, 3)  # replace the head, a fine-tuning habit
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert model(fg.ones(1, 1)).shape == (1, 3)
    layers = nn.ModuleList([nn.Linear(1, 1), nn.ReLU()])
    layers[0] = nn.Tanh()
    assert [type(m).__name__ for m in layers] == ["Tanh", "ReLU"]
    with pytest.raises(IndexError):
        model[3] = nn.ReLU()


def test_norm_layers_print_and_take_bias_as_torch():
    assert repr(nn.BatchNorm1d(4)) == (
        "BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"
    )
    assert repr(nn.BatchNorm1d(2, affine=False)) == (
        "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=False, bias=False, "
        "track_running_stats=True)"
    )
    assert repr(nn.LayerNorm(4)) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.LayerNorm(4, bias=False)).endswith("elementwise_affine=True, bias=False)")
    m = nn.BatchNorm1d(2, bias=False)
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    out = m(fg.tensor([[1.0, 2.0], [3.0, 6.0]]))
    assert out.numpy().round(4).tolist() == [[-1.0, -1.0], [1.0, 1.0]]


def test_data_loading_lives_at_torchs_spelling_too():
    import fusegrad.utils.data as data_module
    from fusegrad.utils.data import DataLoader, TensorDataset

    assert data_module is fg.data and fg.utils.data.DataLoader is DataLoader
    batches = list(DataLoader(TensorDataset(fg.arange(5.0)), batch_size=2))
    assert [b[0].tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0], [4.0]]
