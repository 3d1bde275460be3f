"""nn.init's deprecated names without the underscore: torch's FutureWarning, then the
underscore form's result (nn/init.py)."""

from __future__ import annotations

import pytest

import fusegrad as fg
from fusegrad.nn import init

NAMES = (
    "uniform normal constant eye dirac xavier_uniform xavier_normal kaiming_uniform "
    "kaiming_normal orthogonal"
).split()


@pytest.mark.parametrize("name", NAMES)
def test_old_name_warns_as_torch_and_fills_as_the_new(name):
    shape = (3, 2, 3) if name == "dirac" else (4, 3)
    args = (0.5,) if name == "constant" else ()
    fg.manual_seed(0)
    expected = getattr(init, name + "_")(fg.zeros(*shape), *args).tolist()
    fg.manual_seed(0)
    t = fg.zeros(*shape)
    message = f"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`."
    with pytest.warns(FutureWarning, match=message.replace(".", r"\.")):
        out = getattr(init, name)(t, *args)
    assert out is t and t.tolist() == expected


def test_sparse_zeroes_a_share_of_each_column_and_its_old_name_warns():
    fg.manual_seed(0)
    w = init.sparse_(fg.empty(10, 6), 0.35, std=0.5)
    zeros = (w.numpy() == 0).sum(0)
    assert zeros.tolist() == [4] * 6  # ceil(0.35 * 10) of each column
    kept = w.numpy()[w.numpy() != 0]
    assert 0.3 < kept.std() < 0.7
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.sparse_(fg.empty(3), 0.1)
    with pytest.warns(FutureWarning, match=r"`nn.init.sparse` is now deprecated in favor of"):
        init.sparse(fg.empty(4, 2), 0.5)
