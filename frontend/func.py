"""`fusegrad.func`, torch.func's home here: `functional_call` (nn/stateless.py), a
module called with some of its parameters and buffers replaced for the call. torch.func's
transforms (`grad`, `vmap`, `jacrev`, ...) are not here.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> lin = nn.Linear(2, 1, bias=False)
>>> fg.func.functional_call(lin, {"weight": fg.ones(1, 2)}, fg.tensor([[1.0, 2.0]])).item()
3.0
"""

from .nn.stateless import func_functional_call as functional_call

__all__ = ["functional_call"]
