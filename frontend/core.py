"""The names of `tensor.py` that the modules below it call: `core.Tensor`, `core.where`, ...

`Tensor` is assembled in `tensor.py` from static mixins, one per op family
(`MovementMixin` in movement.py, `MathMixin` in mathops.py, ...), so tensor.py
imports those modules, and they, with creation, autograd and jit under them,
cannot import tensor.py back without an import cycle. Yet they make tensors and
ask `isinstance(x, Tensor)`. They do it through this module, which imports
nothing and which tensor.py fills once, at the end of its import (`bind`):

    from . import core

    def zeros(*shape):
        return core.Tensor(N.const(0.0, shape, float32))

So the frontend's imports go one way (`tests/test_import_graph.py`): the
op families and creation below, tensor.py above them, `fusegrad/__init__.py`
on top. Read a name here as tensor.py's (`core.where` is `tensor.where`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

# what tensor.py binds (a name called before that is an AttributeError, not a None)
NAMES = (
    "Tensor",
    "LazyGrad",
    "DataView",
    "as_tensor",
    "where",
    "broadcast_shapes",
    "promote_tensors",
    "_broadcast_node",
    "realize",
    "drop_graph",
)


def bind(namespace: dict) -> None:
    """Take `NAMES` from tensor.py's namespace (called once, when the class exists)."""
    for name in NAMES:
        globals()[name] = namespace[name]
