"""`fusegrad.nn.utils`: the name PyTorch users reach for; the functions live in clip_grad.py.

>>> from fusegrad import nn
>>> nn.utils.clip_grad_norm_ is nn.clip_grad.clip_grad_norm_
True
"""

from .clip_grad import clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
