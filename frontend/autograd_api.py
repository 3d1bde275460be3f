"""The rest of torch.autograd's public names, put into `fusegrad.autograd` (as
function.py puts `Function` there: autograd.py sits below tensor.py, these need what is
built above it): `Variable`, `gradcheck`, `gradgradcheck`, `detect_anomaly`,
`set_detect_anomaly`, the grad modes, and the submodules `grad_mode`, `anomaly_mode`,
`functional`, `forward_ad`, `graph`, `variable` (each also importable as
`fusegrad.autograd.<name>`, and read as `torch.autograd.<name>` by the torch shim).

>>> import fusegrad as fg
>>> with fg.autograd.no_grad():
...     (fg.ones(2, requires_grad=True) * 2).requires_grad
False
>>> isinstance(fg.ones(1), fg.autograd.Variable)
True
"""

from __future__ import annotations

import functools
import sys
import threading
import types
import warnings
from typing import NamedTuple

from . import autograd, autograd_functional, function
from .autograd_gradcheck import GradcheckError, gradcheck, gradgradcheck
from .autograd_state import (
    anomaly,
    enable_grad,
    inference_mode,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .func_transforms import _variable
from .tensor_base import TensorBase


class _VariableMeta(type):
    def __instancecheck__(cls, other) -> bool:
        return isinstance(other, TensorBase)  # as torch's: every tensor is a Variable


class Variable(metaclass=_VariableMeta):
    """torch's legacy `Variable(data, requires_grad=False)`: returns a tensor, a detached
    alias of `data` (a new leaf that requires grad where asked); `isinstance(t, Variable)`
    holds for every tensor. `volatile` is ignored with torch's warning.

    >>> import fusegrad as fg
    >>> v = Variable(fg.ones(2), requires_grad=True)
    >>> v.requires_grad, v.is_leaf, type(v).__name__
    (True, True, 'Tensor')
    """

    def __new__(cls, data=None, requires_grad: bool = False, volatile: bool = False):
        if volatile:
            warnings.warn(  # torch's words
                "volatile was removed and now has no effect. Use `with torch.no_grad():` instead.",
                stacklevel=2,
            )
        if not isinstance(data, TensorBase):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out


class set_detect_anomaly:  # noqa: N801  (torch's name)
    """Turn anomaly mode on or off (`mode`), as torch's: called plainly it sets the mode;
    as a context manager the mode is restored on exit. See `detect_anomaly`."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev, self.prev_check_nan = anomaly.enabled, anomaly.check_nan
        anomaly.enabled, anomaly.check_nan = bool(mode), bool(check_nan)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        anomaly.enabled, anomaly.check_nan = self.prev, self.prev_check_nan


class detect_anomaly:  # noqa: N801  (torch's name)
    """Anomaly mode, as torch's: within it (a context manager, or a decorator) `backward()`
    raises RuntimeError ("Function '<op>' returned nan values in its 0th output.") when a
    gradient it computes holds a NaN, naming the op of the gradient's graph whose value
    first holds one (fusegrad's op label and the user's line, for torch's
    `XBackward0`). Differs from torch: torch checks each backward function's outputs as the
    engine runs them; fusegrad builds the whole backward graph symbolically, so with anomaly
    mode on, `backward()` computes its gradients at once (not lazily) and checks them after,
    and finds the op by computing the nodes of a gradient that went NaN (a leaf is named
    instead past 4096 nodes). No forward traceback is printed (the error names the line);
    `backward(create_graph=True)` and `grad()` are not checked."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan
        warnings.warn(  # torch's words
            "Anomaly Detection has been enabled. This mode will increase the runtime and "
            "should only be enabled for debugging.",
            stacklevel=2,
        )

    def __enter__(self) -> None:
        self.prev, self.prev_check_nan = anomaly.enabled, anomaly.check_nan
        anomaly.enabled, anomaly.check_nan = True, bool(self.check_nan)

    def __exit__(self, *exc) -> None:
        anomaly.enabled, anomaly.check_nan = self.prev, self.prev_check_nan

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return run


# ------------------------------------------------------------------ forward_ad


class _DualLevels(threading.local):
    level: list | None = None  # the open dual level's (dual, tangent) pairs; one at most


_dual = _DualLevels()


class UnpackedDualTensor(NamedTuple):
    """What `unpack_dual` returns: the primal and its tangent (None if none)."""

    primal: object
    tangent: object


def enter_dual_level() -> int:
    """Open a forward-AD level (torch's: one at a time)."""
    if _dual.level is not None:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")  # torch's
    _dual.level = []
    return 0


def exit_dual_level(*, level=None) -> None:
    """Close the forward-AD level: its duals' tangents are gone."""
    _dual.level = None


class dual_level:  # noqa: N801  (torch's name)
    """torch.autograd.forward_ad.dual_level: the block within which `make_dual` and
    `unpack_dual` work."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, *exc) -> None:
        exit_dual_level()


def make_dual(tensor, tangent, *, level=None):
    """torch.autograd.forward_ad.make_dual: a tensor equal to `tensor` that carries
    `tangent`; every op on it carries the tangent on (read with `unpack_dual`).

    Here the dual is a variable node of its own (as fusegrad.func's transforms make), and
    the tangent of a result is its Jacobian-vector product with the duals' tangents,
    computed when `unpack_dual` asks, as the derivative of a vector-Jacobian product in its
    cotangent (exact, as `fusegrad.func.jvp`). Differs from torch: a dual tensor, and what
    is computed from it, reads `requires_grad=True` (the graph is kept for the tangent)."""
    if _dual.level is None:
        raise RuntimeError(  # torch's words
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            "original Tensor, this is not supported. Tensor is of size "
            f"{list(tensor.shape)} while the given forward gradient is of size "
            f"{list(tangent.shape)}."
        )
    dual = _variable(tensor, "forward_ad", len(_dual.level))
    _dual.level.append((dual, tangent))
    return dual


def unpack_dual(tensor, *, level=None) -> UnpackedDualTensor:
    """torch.autograd.forward_ad.unpack_dual: (primal, tangent) of `tensor`; the tangent is
    None where `tensor` depends on no dual of the open level (or none is open)."""
    pairs = _dual.level or []
    for dual, tangent in pairs:
        if dual is tensor:
            return UnpackedDualTensor(tensor, tangent)
    if not pairs or not isinstance(tensor, TensorBase) or not tensor.requires_grad:
        return UnpackedDualTensor(tensor, None)
    duals = [d for d, _ in pairs]
    # J t = d/du (u^T J) t, with u a cotangent that requires grad (exact: linear in u)
    u = tensor.new_zeros(tensor.shape).requires_grad_()
    gs = autograd.grad(tensor, duals, u, create_graph=True, allow_unused=True)
    terms = [(g * t).sum() for g, (_, t) in zip(gs, pairs) if g is not None]
    if not terms:
        return UnpackedDualTensor(tensor, None)
    total = functools.reduce(lambda a, b: a + b, terms)
    if not total.requires_grad:
        return UnpackedDualTensor(tensor, tensor.new_zeros(tensor.shape))
    (tangent,) = autograd.grad(total, u, allow_unused=True, materialize_grads=True)
    return UnpackedDualTensor(tensor, tangent)


# ------------------------------------------------------------------ graph


class _DisabledHooks(threading.local):
    message: str | None = None  # inside disable_saved_tensors_hooks: its error message


_disabled_hooks = _DisabledHooks()


class saved_tensors_hooks:  # noqa: N801  (torch's name)
    """torch.autograd.graph.saved_tensors_hooks: not supported. fusegrad's backward is a
    symbolic graph that reads the forward's values where they are; no tensor is "saved"
    for it, so there is nothing a pack or unpack hook could be called on. Raises
    NotImplementedError rather than ignoring the hooks (RuntimeError with the message
    inside `disable_saved_tensors_hooks`, as torch's)."""

    def __init__(self, pack_hook, unpack_hook):
        if _disabled_hooks.message is not None:
            raise RuntimeError(_disabled_hooks.message)
        raise NotImplementedError(
            "torch.autograd.graph.saved_tensors_hooks is not supported by fusegrad: its "
            "backward is a symbolic graph with no saved tensors to pack or unpack "
            "(docs/TORCH_SCRIPTS.md)"
        )


class save_on_cpu:  # noqa: N801  (torch's name)
    """torch.autograd.graph.save_on_cpu: a context that changes nothing here (values and
    gradients as without it). torch moves the tensors its backward saves to the CPU;
    fusegrad's backward saves none (it is a symbolic graph over the forward's values, kept
    where they are), so there is nothing to move."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        self.pin_memory, self.device_type = pin_memory, device_type

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


class disable_saved_tensors_hooks:  # noqa: N801  (torch's name)
    """torch.autograd.graph.disable_saved_tensors_hooks(error_message): within it,
    `saved_tensors_hooks` raises RuntimeError with `error_message`, as torch's (outside it
    fusegrad raises NotImplementedError: it has no such hooks)."""

    def __init__(self, error_message: str):
        self.error_message = error_message

    def __enter__(self) -> None:
        self.prev = _disabled_hooks.message
        _disabled_hooks.message = self.error_message

    def __exit__(self, *exc) -> None:
        _disabled_hooks.message = self.prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return run


# ------------------------------------------------------------------ the namespace


def _submodule(name: str, doc: str, attribute: bool = True, **names) -> types.ModuleType:
    """A module `fusegrad.autograd.<name>` holding `names` (importable by that path; an
    attribute of fusegrad.autograd too, unless a function holds that name there)."""
    full = f"{autograd.__name__}.{name}"
    module = types.ModuleType(full, doc)
    module.__dict__.update(names)
    module.__all__ = sorted(names)
    sys.modules[full] = module
    if attribute:
        setattr(autograd, name, module)
    return module


_GRAD_MODES = {
    "no_grad": no_grad,
    "enable_grad": enable_grad,
    "set_grad_enabled": set_grad_enabled,
    "inference_mode": inference_mode,
    "is_grad_enabled": is_grad_enabled,
}
_ANOMALY = {
    "detect_anomaly": detect_anomaly,
    "set_detect_anomaly": set_detect_anomaly,
    "is_anomaly_enabled": is_anomaly_enabled,
    "is_anomaly_check_nan_enabled": is_anomaly_check_nan_enabled,
}
for _name, _value in {
    **_GRAD_MODES,
    **_ANOMALY,
    "Variable": Variable,
    "gradcheck": gradcheck,
    "gradgradcheck": gradgradcheck,
    "GradcheckError": GradcheckError,
    "functional": autograd_functional,
}.items():
    setattr(autograd, _name, _value)
sys.modules[f"{autograd.__name__}.functional"] = autograd_functional
sys.modules[f"{autograd.__name__}.function"] = function
_submodule("grad_mode", "torch.autograd.grad_mode: the grad modes.", **_GRAD_MODES)
_submodule("anomaly_mode", "torch.autograd.anomaly_mode: see detect_anomaly.", **_ANOMALY)
_submodule("variable", "torch.autograd.variable: the legacy Variable.", Variable=Variable)
_submodule(
    "gradcheck",
    "torch.autograd.gradcheck's module (the function of that name is autograd.gradcheck).",
    attribute=False,
    gradcheck=gradcheck,
    gradgradcheck=gradgradcheck,
    GradcheckError=GradcheckError,
)
_submodule(
    "forward_ad",
    "torch.autograd.forward_ad: dual tensors (see make_dual).",
    dual_level=dual_level,
    enter_dual_level=enter_dual_level,
    exit_dual_level=exit_dual_level,
    make_dual=make_dual,
    unpack_dual=unpack_dual,
    UnpackedDualTensor=UnpackedDualTensor,
)
_submodule(
    "graph",
    "torch.autograd.graph: saved-tensor hooks (not supported: see saved_tensors_hooks).",
    saved_tensors_hooks=saved_tensors_hooks,
    save_on_cpu=save_on_cpu,
    disable_saved_tensors_hooks=disable_saved_tensors_hooks,
)


def share_top_level(namespace: dict) -> None:
    """Make the grad-mode and anomaly names of fusegrad.autograd and its submodules the
    very objects of fusegrad's top level (`namespace`: its globals, after it wraps its
    functions for `out=`), so `fg.autograd.no_grad is fg.no_grad`, as torch's."""
    for name in (*_GRAD_MODES, *_ANOMALY):
        value = namespace.get(name)
        if value is None:
            continue
        setattr(autograd, name, value)
        for sub in ("grad_mode", "anomaly_mode"):
            module = sys.modules[f"{autograd.__name__}.{sub}"]
            if name in module.__dict__:
                setattr(module, name, value)
