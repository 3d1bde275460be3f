"""`fusegrad.cuda.amp`: torch.cuda.amp's spellings of autocast and GradScaler.

torch deprecates these for `torch.amp.autocast("cuda", ...)` and
`torch.amp.GradScaler("cuda", ...)`, but scripts such as nanoGPT still write them:
the same classes here, with the device fixed to cuda and torch.cuda.amp's argument
order (no device argument first).

>>> import fusegrad as fg
>>> scaler = fg.cuda.amp.GradScaler(enabled=False)
>>> scaler.is_enabled(), scaler.get_scale()
(False, 1.0)
"""

from __future__ import annotations

from . import amp
from .autocast import autocast as _autocast


class autocast(_autocast):
    """`torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)`:
    `fg.autocast("cuda", ...)`."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(amp.GradScaler):
    """`torch.cuda.amp.GradScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)`: `fg.amp.GradScaler("cuda", ...)`."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )
