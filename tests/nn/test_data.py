"""Datasets, the DataLoader, and MiniTorch's six toy datasets (labels re-derived from rules)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.data
import fusegrad.optim
from fusegrad.data import DataLoader, Dataset, TensorDataset
from fusegrad.datasets import toy as datasets


def test_torch_style_import_paths():
    assert fg.data is fusegrad.data and fg.data.DataLoader is DataLoader
    assert fg.optim is fusegrad.optim and fg.optim.SGD is fg.nn.optim.SGD


def test_tensor_dataset_indexing_and_checks():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = fg.tensor([0, 1, 0, 1, 1, 0])
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    xi, yi = ds[4]
    np.testing.assert_array_equal(xi.numpy(), [8.0, 9.0])
    assert yi.item() == 1 and yi.dtype == fg.int64
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(x, np.zeros(5))


def collect(loader):
    return [tuple(t.numpy() for t in batch) for batch in loader]


def test_dataloader_batches_in_order():
    x = np.arange(10, dtype=np.float64)[:, None] * [1.0, -1.0]
    y = np.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = collect(loader)
    assert len(loader) == len(batches) == 3
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].dtype == np.float32  # float64 arrays arrive as fusegrad's default float
    np.testing.assert_array_equal(batches[2][0], x[8:].astype(np.float32))
    dropped = DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [b[1].tolist() for b in collect(dropped)][-1] == [4, 5, 6, 7]


def test_dataloader_shuffles_reproducibly():
    ds = TensorDataset(np.arange(50))

    def epoch_orders(**kwargs):
        loader = DataLoader(ds, batch_size=8, shuffle=True, **kwargs)
        return [np.concatenate([b[0] for b in collect(loader)]) for _ in range(2)]

    first, second = epoch_orders(seed=3)
    assert sorted(first.tolist()) == list(range(50))  # every sample exactly once
    assert sorted(second.tolist()) == list(range(50))
    assert not np.array_equal(first, second)  # a new permutation each epoch
    again = epoch_orders(seed=3)
    np.testing.assert_array_equal(again[0], first)
    np.testing.assert_array_equal(again[1], second)
    expected = np.random.default_rng(9).permutation(50)
    got = epoch_orders(generator=np.random.default_rng(9))[0]
    np.testing.assert_array_equal(got, expected)
    fg.manual_seed(5)
    a = epoch_orders()
    fg.manual_seed(5)
    b = epoch_orders()
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], np.arange(50))


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.array([i, i * i], dtype=np.float32), "y": i % 2, "w": float(i) / 2}


def test_dataloader_collates_a_custom_dataset():
    batches = list(DataLoader(Squares(), batch_size=2))
    assert len(batches) == 3
    first = batches[0]
    np.testing.assert_array_equal(first["x"].numpy(), [[0, 0], [1, 1]])
    assert first["y"].tolist() == [0, 1] and first["y"].dtype == fg.int64
    assert first["w"].tolist() == [0.0, 0.5] and first["w"].dtype == fg.float64  # torch's
    single = list(DataLoader(Squares(), batch_size=None))
    assert len(single) == 5 and single[3]["y"] == 1
    assert isinstance(single[3]["x"], fg.Tensor) and single[3]["x"].tolist() == [3.0, 9.0]
    with pytest.raises(NotImplementedError):
        Dataset()[0]
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(Squares(), batch_size=0)


# ---------------------------------------------------------------- MiniTorch's toy datasets

RULES = {
    "simple": lambda a, b: a < 0.5,
    "diag": lambda a, b: a + b < 0.5,
    "split": lambda a, b: a < 0.2 or a > 0.8,
    "xor": lambda a, b: (a < 0.5 and b > 0.5) or (a > 0.5 and b < 0.5),
    "circle": lambda a, b: (a - 0.5) ** 2 + (b - 0.5) ** 2 > 0.1,
}


@pytest.mark.parametrize("name", list(RULES))
def test_toy_dataset_labels_follow_minitorch_rules(name):
    ds = datasets.load(name, 200, seed=1)
    assert ds.X.shape == (200, 2) and ds.y.shape == (200,) and len(ds) == 200
    assert ds.X.min() >= 0.0 and ds.X.max() < 1.0
    expected = [1.0 if RULES[name](a, b) else 0.0 for a, b in ds.X.astype(np.float64)]
    np.testing.assert_array_equal(ds.y, expected)
    assert 0 < ds.y.sum() < 200  # both classes present
    np.testing.assert_array_equal(datasets.load(name, 200, seed=1).X, ds.X)
    assert not np.array_equal(datasets.load(name, 200, seed=2).X, ds.X)
    x, y = next(iter(DataLoader(ds, batch_size=200)))
    assert x.shape == (200, 2) and y.shape == (200,)


def test_spiral_is_minitorchs_two_spirals():
    n = 50
    ds = datasets.spiral(n)
    half = n // 2

    def x(t):
        return t * math.cos(t) / 20.0

    def y(t):
        return t * math.sin(t) / 20.0

    ts = [10.0 * (i / half) for i in range(5, 5 + half)]
    first = [(x(t) + 0.5, y(t) + 0.5) for t in ts]
    second = [(y(-t) + 0.5, x(-t) + 0.5) for t in ts]
    np.testing.assert_allclose(ds.X, np.array(first + second), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ds.y, [0.0] * half + [1.0] * half)


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="unknown dataset"):
        datasets.load("moons")


def test_default_collate_and_convert_follow_torchs_types():
    """torch's rules: a tuple sample collates to a list (a namedtuple stays one), numpy
    arrays and scalars keep their dtype, Python floats are float64 and bools bool, text
    stays a list; without batching (`batch_size=None`) numpy values become tensors."""
    from fusegrad.data import default_collate, default_convert

    batch = default_collate([(np.zeros(2), 1.5, True, "a"), (np.ones(2), 2.5, False, "b")])
    assert isinstance(batch, list) and len(batch) == 4
    assert batch[0].dtype == fg.float64 and batch[0].shape == (2, 2)
    assert batch[1].dtype == fg.float64 and batch[1].tolist() == [1.5, 2.5]
    assert batch[2].dtype == fg.bool and batch[2].tolist() == [True, False]
    assert batch[3] == ["a", "b"]
    assert default_collate([np.float32(1), np.float32(2)]).dtype == fg.float32
    assert default_collate([np.int16(1), np.int16(2)]).dtype == fg.int16
    loader = DataLoader(fg.data.TensorDataset(fg.arange(4.0), fg.arange(4)), batch_size=2)
    first = next(iter(loader))
    assert isinstance(first, list) and first[1].tolist() == [0, 1]  # torch's list
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal"):
        default_collate([[1, 2], [3]])
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        default_collate([fg.zeros(2), fg.zeros(3)])
    converted = default_convert((np.arange(3), np.float64(0.5), "s", 7))
    assert isinstance(converted, list) and converted[2:] == ["s", 7]
    assert converted[0].dtype == fg.int64 and converted[1].dtype == fg.float64
    assert converted[1].shape == ()
    texts = np.array(["a", "b"])
    assert default_convert(texts) is texts  # text arrays stay numpy, as torch's


def test_chain_and_stack_datasets_as_torchs():
    from fusegrad.data import ChainDataset, IterableDataset, StackDataset, TensorDataset

    class Count(IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    chain = ChainDataset([Count(2), Count(3)])
    assert list(chain) == [0, 1, 0, 1, 2] and list(chain) == [0, 1, 0, 1, 2] and len(chain) == 5
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(ChainDataset([TensorDataset(fg.zeros(2))]))
    named = StackDataset(a=TensorDataset(fg.arange(3)), b=[10, 11, 12])
    assert len(named) == 3 and named[1]["b"] == 11 and named[1]["a"][0].item() == 1
    both = StackDataset(TensorDataset(fg.arange(3)), [10, 11, 12])
    assert both[2][1] == 12 and [s[1] for s in both.__getitems__([0, 2])] == [10, 12]
    batch = next(iter(DataLoader(both, batch_size=2)))
    assert batch[0][0].tolist() == [0, 1] and batch[1].tolist() == [10, 11]
    with pytest.raises(ValueError, match="At least one dataset should be passed"):
        StackDataset()
    with pytest.raises(ValueError, match="but both types are given"):
        StackDataset([1], a=[1])
    with pytest.raises(ValueError, match="Size mismatch between datasets"):
        StackDataset([1, 2], [1])
