"""`fg.amp.GradScaler`: loss scaling for 16-bit training, as torch.amp.GradScaler.

A float16 gradient underflows to 0 below 6e-8; scaling the loss by 2^16 before
`backward()` lifts the gradients into range, and `step` divides them back before the
optimizer sees them. A step whose gradients hold an inf or a NaN (the scale was too
big) is skipped and the scale halves; after `growth_interval` clean steps it doubles.

>>> import fusegrad as fg
>>> w = fg.tensor([1.0, 2.0], requires_grad=True)
>>> opt = fg.optim.SGD([w], lr=0.1)
>>> scaler = fg.amp.GradScaler("cpu", init_scale=1024.0)
>>> scaler.scale((w * w).sum()).backward()
>>> w.grad.tolist()  # scaled
[2048.0, 4096.0]
>>> scaler.step(opt)
>>> scaler.update()
>>> w.tolist(), scaler.get_scale()
([0.800000011920929, 1.600000023841858], 1024.0)
"""

from __future__ import annotations

import math
import warnings

from .autocast import autocast  # noqa: F401  (fg.amp.autocast, torch.amp.autocast's home)
from .errors import ArgumentError, fail
from .runtime.backend import get_backend


def _unavailable(device: str) -> bool:
    """Whether `device`'s backend says it cannot run here (False for a device fusegrad
    has no backend for: the scaler then works as on the CPU)."""
    try:
        return get_backend(device).why_unavailable() is not None
    except KeyError:
        return False


class GradScaler:
    """Scale the loss, unscale the gradients, skip steps whose gradients are not finite,
    and adapt the scale (torch.amp.GradScaler's methods and state_dict), for `device`
    "cuda" (the default) or "cpu": the scaler works the same on both. As torch's, a cuda
    scaler where the cuda device is not available (its backend says why not) warns and
    turns itself off: nanoGPT asks for one whenever it trains in float16, on the CPU too.
    With `enabled=False` every method passes through (scale returns its input, step
    steps, `get_scale()` is 1.0).
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        if growth_factor <= 1.0:
            fail(ArgumentError, "GradScaler", "The growth factor must be > 1.0.")
        if not 0.0 < backoff_factor < 1.0:
            fail(ArgumentError, "GradScaler", "The backoff factor must be < 1.0.")
        self.device = str(device)
        self._enabled = bool(enabled)
        if self._enabled and _unavailable(self.device):
            kind = self.device.partition(":")[0]
            warnings.warn(  # torch's warning (for cuda), word for word
                f"torch.{kind}.amp.GradScaler is enabled, but {kind.upper()} is not "
                "available.  Disabling.",
                stacklevel=2,
            )
            self._enabled = False
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        # id(optimizer) -> {"unscaled": bool, "found_inf": bool}, cleared by update()
        self._per_optimizer: dict[int, dict] = {}

    # ---------------------------------------------------------------- the training step
    def scale(self, outputs):
        """`outputs` (a tensor, or lists, tuples and dicts of them) times the scale; the
        dtype stays (a Python number does not widen a tensor)."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, dict):
            return {k: self.scale(v) for k, v in outputs.items()}
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        """Divide `optimizer`'s gradients by the scale, in place, and note whether any is
        inf or NaN. Once per optimizer between updates (as torch: a second call raises);
        call it before clipping gradients. float16 gradients are refused, as torch
        refuses them: keep the parameters in float32 and run the model in 16 bits."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["unscaled"]:
            fail(
                RuntimeError,
                "unscale_",
                "unscale_() has already been called on this optimizer since the last update().",
            )
        grads = [
            p for group in optimizer.param_groups for p in group["params"] if p.grad is not None
        ]
        if any(p.grad.dtype.name == "float16" for p in grads):
            fail(ValueError, "unscale_", "Attempting to unscale FP16 gradients.")
        inv = 1.0 / self._scale
        finite = None
        for p in grads:
            p.grad = (p.grad.float() * inv).to(p.grad.dtype)
            ok = p.grad.isfinite().all()
            finite = ok if finite is None else finite & ok
        state["found_inf"] = finite is not None and not bool(finite)  # one host read
        state["unscaled"] = True

    def step(self, optimizer, *args, **kwargs):
        """`optimizer.step(*args, **kwargs)` on unscaled gradients, unless one of them is
        inf or NaN: then the step is skipped (the parameters stay) and None returned."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            fail(
                RuntimeError,
                "step",
                "Closure use is not currently supported if GradScaler is enabled.",
            )
        state = self._state(optimizer)
        if state.get("stepped"):
            fail(RuntimeError, "step", "step() has already been called since the last update().")
        if not state["unscaled"]:
            self.unscale_(optimizer)
        state["stepped"] = True
        if state["found_inf"]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        """Adapt the scale: times `backoff_factor` if a step this round found inf or NaN
        gradients, times `growth_factor` after `growth_interval` clean updates in a row;
        or set it to `new_scale` (a number or a one-element tensor)."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        elif not self._per_optimizer:  # torch's assertion, word for word
            raise AssertionError("No inf checks were recorded prior to update.")
        elif any(s["found_inf"] for s in self._per_optimizer.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = self._scale * self._growth_factor
                if math.isfinite(grown):  # torch keeps the scale where growing overflows
                    self._scale = grown
                self._growth_tracker = 0
        self._per_optimizer.clear()

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(
            id(optimizer), {"unscaled": False, "found_inf": False}
        )

    # ---------------------------------------------------------------- accessors, state
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled, as torch)."""
        return self._scale if self._enabled else 1.0

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker (empty when disabled)."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not state_dict:
            fail(
                RuntimeError,
                "load_state_dict",
                "The source state dict is empty, possibly because it was saved from a "
                "disabled instance of GradScaler.",
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
