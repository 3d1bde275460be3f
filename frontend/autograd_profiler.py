"""`torch.autograd.profiler` for scripts run by `python -m fusegrad`: `record_function`,
torch.profiler's (a named region in `fusegrad.profile()`'s table and trace). Its legacy
`profile` is not here: a script that asks for it is told so, by name.

>>> from fusegrad import autograd_profiler
>>> with autograd_profiler.record_function("forward"):
...     pass
"""

from __future__ import annotations

from .torch_profiler import record_function

__all__ = ["record_function"]
