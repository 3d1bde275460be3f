"""The hook-based `nn.utils.weight_norm` / `remove_weight_norm` and `nn.utils.spectral_norm`
/ `remove_spectral_norm`, as torch.nn.utils.weight_norm and torch.nn.utils.spectral_norm
(the forms older GAN scripts use; nn/parametrizations.py has the newer ones).

Each keeps the weight's parts as parameters and buffers of the module (`weight_g` and
`weight_v`; `weight_orig` and the power iteration's vectors `weight_u` and `weight_v`)
and a forward pre-hook that recomputes `module.weight`, a plain attribute, before each
forward: a lazy graph over those parameters, so it fuses into the layer's kernels and
`backward()` reaches them. The spectral norm's hook runs `n_power_iterations` steps of
power iteration in training mode and updates `weight_u` and `weight_v` (lazily, computed
with the next optimizer step); given the same vectors, the values are torch's.

>>> import warnings
>>> import fusegrad as fg
>>> from fusegrad import nn
>>> with warnings.catch_warnings():  # (torch's FutureWarning: this form is deprecated)
...     warnings.simplefilter("ignore", FutureWarning)
...     m = nn.utils.weight_norm(nn.Linear(3, 2))
>>> list(m.state_dict())
['bias', 'weight_g', 'weight_v']
>>> m = nn.utils.spectral_norm(nn.Linear(3, 2))
>>> list(m.state_dict())
['bias', 'weight_orig', 'weight_u', 'weight_v']
"""

from __future__ import annotations

import warnings

from ..nnapi import Tensor, no_grad, randn
from .conv_transpose import ConvTransposeNd
from .lazy import UninitializedParameter
from .module import Module, Parameter
from .normalization import normalize
from .parametrizations import (
    norm_except_dim,
    sigma_of,
    update_vectors,
    weight_matrix,
    weight_norm_of,
)

__all__ = ["remove_spectral_norm", "remove_weight_norm", "spectral_norm", "weight_norm"]


def _pre_hooks(module: Module) -> dict:
    """The module's forward hooks by handle id (Module._add_hook's store)."""
    return module.__dict__.get("_hooks") or {}


def _find(module: Module, kind: type, name: str):
    """(handle id, hook) of the `kind` hook of `name` on `module`, or None."""
    for key, (hook_kind, hook, _, _) in _pre_hooks(module).items():
        if hook_kind == "pre" and isinstance(hook, kind) and hook.name == name:
            return key, hook
    return None


# ---------------------------------------------------------------- weight norm


class WeightNorm:
    """The forward pre-hook of `nn.utils.weight_norm`: `module.<name>` from `<name>_g` and
    `<name>_v` before each forward."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return weight_norm_of(v, g, self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn(
            "`torch.nn.utils.weight_norm` is deprecated in favor of "
            "`torch.nn.utils.parametrizations.weight_norm`.",
            FutureWarning,
            stacklevel=3,
        )
        if _find(module, WeightNorm, name) is not None:
            raise RuntimeError(
                f"Cannot register two weight_norm hooks on the same parameter {name}"
            )
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if isinstance(weight, UninitializedParameter):
            raise ValueError(
                "The module passed to `WeightNorm` can't have uninitialized parameters. "
                "Make sure to run the dummy forward before applying weight normalization"
            )
        del module._parameters[name]
        with no_grad():
            module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim)))
        module.register_parameter(name + "_v", Parameter(weight))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization by a forward pre-hook, as torch's (deprecated there, with a
    FutureWarning, in favor of `nn.utils.parametrizations.weight_norm`): `module.<name>`
    becomes the parameters `<name>_g` (the norms over every dim but `dim`; over the whole
    tensor for `dim=None` or -1) and `<name>_v`, and is recomputed as
    `v * (g / ||v||)` before each forward. Returns `module`."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: `module.<name>` is a parameter again, of the current value."""
    found = _find(module, WeightNorm, name)
    if found is None:
        raise ValueError(f"weight_norm of '{name}' not found in {module}")
    key, hook = found
    hook.remove(module)
    del module.__dict__["_hooks"][key]
    return module


# ---------------------------------------------------------------- spectral norm


class SpectralNorm:
    """The forward pre-hook of `nn.utils.spectral_norm`: `module.<name>` from
    `<name>_orig` divided by its estimated largest singular value before each forward."""

    _version = 1

    def __init__(
        self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        return weight_matrix(weight, self.dim)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                held = weight_mat.detach()
                new_u, new_v = u, v
                for _ in range(self.n_power_iterations):
                    new_v = normalize(held.T.mv(new_u), dim=0, eps=self.eps)
                    new_u = normalize(held.mv(new_v), dim=0, eps=self.eps)
                update_vectors([(u, new_u), (v, new_v)])
                u, v = u.clone(), v.clone()
        return weight / sigma_of(weight_mat, u, v)

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float):
        if _find(module, SpectralNorm, name) is not None:
            raise RuntimeError(
                f"Cannot register two spectral_norm hooks on the same parameter {name}"
            )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        if isinstance(weight, UninitializedParameter):
            raise ValueError(
                "The module passed to `SpectralNorm` can't have uninitialized parameters. "
                "Make sure to run the dummy forward before applying spectral normalization"
            )
        with no_grad():
            h, w = fn.reshape_weight_to_matrix(weight).shape
            like = {"dtype": weight.dtype, "device": weight.device}
            u = normalize(randn(h, **like), dim=0, eps=fn.eps).realize()
            v = normalize(randn(w, **like), dim=0, eps=fn.eps).realize()
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.detach())
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Spectral normalization by a forward pre-hook, as torch's: `module.<name>` becomes
    the parameter `<name>_orig` and the buffers `<name>_u` and `<name>_v` (random unit
    vectors at first), and before each forward `module.<name>` is recomputed as
    `<name>_orig / sigma`, sigma estimated by `n_power_iterations` steps of power
    iteration in training mode (updating the vectors), from the vectors as they are in
    eval mode. `dim`: the output channels' dim (1 for a transposed convolution, else 0,
    by default). Returns `module`."""
    if dim is None:
        dim = 1 if isinstance(module, ConvTransposeNd) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: `module.<name>` is a parameter again, of the current value
    (computed from the vectors as they are)."""
    found = _find(module, SpectralNorm, name)
    if found is None:
        raise ValueError(f"spectral_norm of '{name}' not found in {module}")
    key, hook = found
    hook.remove(module)
    del module.__dict__["_hooks"][key]
    return module
