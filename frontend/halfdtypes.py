"""The default float dtype (`fg.set_default_dtype`, `fg.get_default_dtype`), which the
16-bit floats made worth setting.

>>> import fusegrad as fg
>>> fg.set_default_dtype(fg.float16)
>>> fg.tensor([1.5]).dtype, fg.zeros(2).dtype, (fg.tensor([1]) + 0.5).dtype
(fusegrad.float16, fusegrad.float16, fusegrad.float16)
>>> fg.set_default_dtype(fg.float32)
"""

from __future__ import annotations

from .errors import checked_dtype
from .ir.dtypes import default_float, set_default_float


def get_default_dtype():
    """The dtype of float tensors made from Python floats (float32 unless
    `set_default_dtype` changed it), as torch.get_default_dtype."""
    return default_float()


def set_default_dtype(d) -> None:
    """Make `d` the dtype Python floats become, as torch.set_default_dtype: float32,
    float64, float16 or bfloat16; anything else raises TypeError, as in torch. It changes
    `tensor([1.5])`, `zeros`, `ones`, `full`, `rand`, `randn`, `arange` and `linspace`
    with floats, and an integer tensor combined with a Python float."""
    set_default_float(checked_dtype(d, "set_default_dtype"))
