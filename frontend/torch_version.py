"""`torch.version` for scripts run by `python -m fusegrad`: fusegrad's version where torch's
would be, and the answers of a torch built without CUDA (`cuda` and `hip` None), which is
what fusegrad links to: its GPU path runs through PyCUDA, not a CUDA build of its own.

>>> from fusegrad import torch_version
>>> torch_version.cuda is None and torch_version.hip is None
True
"""

from __future__ import annotations

from . import __version__

cuda = None
hip = None
debug = False
git_version = "fusegrad"

__all__ = ["__version__", "cuda", "debug", "git_version", "hip"]
