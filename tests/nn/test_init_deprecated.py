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
